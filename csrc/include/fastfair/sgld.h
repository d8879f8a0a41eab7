// Batched stochastic-gradient Langevin dynamics (SGLD) and the FedEvg server step, each one fused
// pass over [N, D] arrays (N samples of D elements each):
//
//   sgld_step:          out = clamp(x - step_n * clip(grad) + noise_n * z)
//   fedevg_server_step: g_j = sum_i w_i e_ij G_ij / sum_i w_i e_ij   (self-normalised over clients)
//                       out_j = clamp(x_j - step_j * clip(g_j) + noise_j * z_j)
//
// clip(v) = min(max(v, -c), c); clamp(v) = min(max(v, lo), hi).
//
// Normal variates z are a pure function of (seed, g), where g = offset + flat element index: the
// stream is cut into blocks of 64 elements; element j of block b takes word k = j / 16 of
// Philox4x32-10 at counter c = 16 b + j % 16 (key = seed, counter words 2-3 = (0, kTagGaussian)),
// and Box-Muller pairs words (0, 1) and (2, 3) of each counter:
//   u_r = (w_r >> 8) 2^-24 + 2^-25 in (0, 1),  u_a = (w_a >> 8) 2^-24 in [0, 1)
//   z_0 = sqrt(-2 ln u_r0) cos(2 pi u_a1),  z_1 = sqrt(-2 ln u_r0) sin(2 pi u_a1),  same for 2, 3.
// Results therefore depend neither on the thread count nor on how a batch is split into calls
// (a call on rows [a, b) with offset + a D reproduces those rows of a whole-batch call). |z| is
// at most sqrt(50 ln 2) = 5.9 (24-bit uniforms).
#pragma once

#include <cstdint>

#include "fastfair/common.h"
#include "fastfair/philox.h"

namespace fastfair {

constexpr int64_t kGaussBlock = 64;      // elements per block of the stream
constexpr int64_t kGaussCounters = 16;   // Philox counters per block

// The Langevin update applied to every element (shared by both ops).
struct LangevinArgs {
  double step;               // used when step_vec == nullptr
  const double* step_vec;    // optional [N] per-sample step (x's device)
  double noise;              // used when noise_vec == nullptr
  const double* noise_vec;   // optional [N] per-sample noise std (x's device)
  double grad_clip;          // c > 0; +inf: no clip
  double lo, hi;             // clamp bounds; -inf / +inf: no clamp
  uint64_t seed, offset;
};

struct SgldArgs {
  DType dtype;           // float32 or float64: x, grad, out
  int64_t rows, cols;    // N, D; all three arrays C-contiguous [N, D]
  const void* x;
  const void* grad;
  void* out;             // may alias x
  LangevinArgs u;
};

struct FedEvgServerArgs {
  DType dtype;             // float32 or float64: x, G, out
  int64_t clients;         // m >= 1
  int64_t rows, cols;      // M synthetic samples of D elements
  const void* x;           // [M, D]
  const void* G;           // [m, M, D] energy gradients at x
  const double* energy;    // [m, M] energy weights e_ij > 0 (e.g. in {1/e, 1, e})
  const double* weight;    // [m] client weights w_i >= 0, sum > 0
  void* out;               // [M, D], may alias x
  LangevinArgs u;
};

namespace cpu {
Status sgld_step(const SgldArgs& args);
Status fedevg_server_step(const FedEvgServerArgs& args);
}  // namespace cpu

namespace cuda {
Status sgld_step(const SgldArgs& args, void* stream);
Status fedevg_server_step(const FedEvgServerArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
