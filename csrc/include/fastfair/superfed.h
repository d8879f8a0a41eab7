// SuPerFed client kernels (thesis Ch. II, docs/algorithms.md §4) over a cohort of m clients whose
// parameters are flat float32 rows [m, P], cut into S segments (layers) by offsets [S + 1].
// Twinned segments have a federated copy f and a local copy l; the others (e.g. biases) exist
// only in f and are shared.
//
// Pass 1, superfed_reduce (one read of f, l, g):
//   out[r, s] = (<f, l>_s, |f|^2_s, |l|^2_s, |f - g|^2_s) over segment s of row r
//   (the first three are 0 for untwinned segments).
// Pass 2, superfed_step (one read of f, l, g, grad, momentum buffers; one write of each state and
// of the mixed model), per element of segment s of row r, with lam = lam[r, s] (0 untwinned):
//   gf = (1 - lam) grad + prox[r, s] (f - g) + wd f + [twinned] (orth_af l + orth_bf f)
//   gl = lam grad + wd l + orth_al f + orth_bl l                          (twinned, train_local)
//   bf = momentum bf + gf,  f -= lr bf;   bl = momentum bl + gl,  l -= lr bl
//   mixed = (1 - lam_next) f + lam_next l  (twinned; f otherwise), with the updated f and l
// grad == nullptr: no update, only mixed = (1 - lam) f + lam l (the first mix of a round).
// Rows with active[r] == 0 keep their state (their mixed row is still written).
//
// Partial sums are taken over fixed tiles and added in tile order, so results do not depend on
// the thread count.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

struct SuperFedLayout {
  int64_t rows, cols, segments;   // m, P, S
  const int64_t* offsets;         // [S + 1], 0 = offsets[0] <= ... <= offsets[S] = P
  const uint8_t* twinned;         // [S]
};

struct SuperFedReduceArgs {
  SuperFedLayout layout;
  const float* f;   // [m, P]
  const float* l;   // [m, P]
  const float* g;   // [P] the global model
  double* out;      // [m, S, 4]
};

struct SuperFedStepArgs {
  SuperFedLayout layout;
  float* f;               // [m, P] federated models, updated
  float* l;               // [m, P] local models, updated when train_local
  const float* g;         // [P] global model (prox anchor)
  const float* grad;      // [m, P] d loss / d mixed, or nullptr (mix only)
  float* buf_f;           // [m, P] momentum buffers
  float* buf_l;
  const double* lam;      // [m, S] this step's mixing weights
  const double* lam_next; // [m, S] weights of the mixed output (nullptr: lam)
  float* mixed;           // [m, P] output
  const double* prox;     // [m, S] prox coefficients
  const double* orth;     // [m, 4] (af, bf, al, bl)
  const uint8_t* active;  // [m]
  double lr, momentum, weight_decay;
  bool train_local;
};

namespace cpu {
Status superfed_reduce(const SuperFedReduceArgs& args);
Status superfed_step(const SuperFedStepArgs& args);
}  // namespace cpu

namespace cuda {
Status superfed_reduce(const SuperFedReduceArgs& args, void* stream);
Status superfed_step(const SuperFedStepArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
