// Quadratic programs over the probability simplex, the generalized (A-norm) projection of the
// Online Newton Step (ONS):
//
//   p* = argmin_{p >= 0, 1'p = 1}  1/2 p'Hp - b'p          H [K, K] symmetric positive definite
//
// KKT: Hp - b - nu 1 - mu = 0, mu >= 0, p >= 0, mu_i p_i = 0, 1'p = 1.
//
// Every solver returns a certificate (QpInfo). Its kkt_residual is the largest violation of the
// KKT conditions at the returned p, divided by scale = 1 + max(max_i |H_ii|, |b|_inf) (a bound on
// |Hp|_inf + |b|_inf over the simplex, so rounding of p itself stays below scale * K * 2^-52):
//   r = Hp - b, F = {i : p_i > 0}, nu = (max_F r + min_F r) / 2,
//   max( max_F |r_i - nu|, max_{i not in F} (nu - r_i)^+, |1'p - 1| ).
// Returned p are always on the simplex: p_i >= 0 and |1'p - 1| <= K * 2^-52.
//
// All arrays are fp64, C-contiguous. Results do not depend on the number of OpenMP threads.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

struct QpInfo {
  double kkt_residual = 0.0;  // scaled KKT violation (see above)
  double nu = 0.0;            // multiplier of 1'p = 1 at the returned p
  int64_t iterations = 0;     // active-set changes (active set) or gradient steps (FISTA)
  int64_t support_size = 0;   // |{i : p_i > 0}|
  int64_t refactorizations = 0;  // ONS step only: times the maintained inverse was rebuilt
  bool converged = true;      // false when max_iter was reached first
};

// Dense problem with H given. `warm` (nullable, [K]) is a starting point; it is moved onto the
// simplex first, and its zero set is the initial active set. A cold start factors all of H, which
// also proves H positive definite; a warm start factors only the blocks it visits.
struct SimplexQpArgs {
  const double* H;  // [K, K]
  const double* b;  // [K]
  int64_t K;
  const double* warm;  // [K] or nullptr
  int64_t max_iter;    // active-set changes allowed (<= 0: 10 K + 100)
  double* p;           // [K] out
};

// Batched problems H [B, K, K], b [B, K] -> p [B, K]. method 0: exact active set (CPU only);
// method 1: FISTA with adaptive restart and Euclidean simplex projections, stopped when the
// projected-gradient step is below tol (relative to scale), then polished on the detected support.
struct SimplexQpBatchArgs {
  const double* H;
  const double* b;
  int64_t batch, K;
  int method;        // 0 active set, 1 FISTA
  int64_t max_iter;  // FISTA steps (method 1) or active-set changes (method 0; <= 0: default)
  double tol;        // FISTA stopping tolerance
  double* p;         // [B, K] out
  double* kkt;       // [B] out: kkt_residual
  int64_t* iterations;  // [B] out
  int64_t* support;     // [B] out
};

// One round of the Online Newton Step on maintained state (all host memory, [K, K] or [K]):
//   H   <- H + beta g g'                         (as the stored H plus a pending term, below)
//   b   <- b + s g,  s = beta <g, p> - 1 (paper) or s = -1 (reference-code variant)
//   p   <- argmin over the simplex of 1/2 p'Hp - b'p
// Both matrices carry the last rank-1 update as a pending term, folded into the next round's
// single pass over each: H = H_stored + beta pending_g pending_g' and H^{-1} = Hinv_stored -
// pending_c pending_u pending_u' (Sherman-Morrison). The projection works on the zero set Z with
// the Schur complement (H^{-1})_ZZ and needs O(K |Z| + |Z|^3); large zero sets, or a certificate
// above tol, switch to the Cholesky of H_FF (and a rebuild of the inverse from H when the
// certificate failed).
//
// A step that fails (non-finite g, an update that overflows, an H + beta g g' that is not
// numerically positive definite) leaves H, H^{-1}, b and p as they logically were: the only
// changes are the previous pending terms settled into the stored matrices (by the same
// expressions ons_settle uses, so bit for bit what the stored matrices would hold after it).
struct OnsStepArgs {
  int64_t K;
  double* H;          // [K, K]
  double* Hinv;       // [K, K]
  double* pending_u;  // [K]
  double* pending_c;  // [1]
  double* pending_g;  // [K] the update beta g g' not yet in H (zeros: none)
  double* b;          // [K]
  double* p;          // [K] in: p_t, out: p_{t+1}
  const double* g;    // [K]
  double beta;
  bool paper;         // linear-term rule, see above
  double tol;         // certificate threshold of the fast path
  int64_t max_iter;   // active-set changes allowed (<= 0: 10 K + 100)
};

// Folds the pending terms of an ONS state into the stored H and Hinv and zeroes them, bit for bit
// as the next step's passes would: the stored matrices are then H and H^{-1} themselves.
struct OnsSettleArgs {
  int64_t K;
  double* H;
  double* Hinv;
  const double* pending_u;
  double* pending_c;
  double* pending_g;
  double beta;
};

namespace cpu {
Status simplex_qp(const SimplexQpArgs& args, QpInfo* info);
Status simplex_qp_batched(const SimplexQpBatchArgs& args);
Status ons_step(const OnsStepArgs& args, QpInfo* info);
Status ons_settle(const OnsSettleArgs& args);
}  // namespace cpu

namespace cuda {
// Largest K of the batched CUDA solver (its vectors live in shared memory).
constexpr int64_t kSimplexQpMaxK = 2048;
// FISTA only (method 1): one thread block per problem; all pointers are device memory.
Status simplex_qp_batched(const SimplexQpBatchArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
