// What the Online Newton Step (ons_step.cpp) shares with the simplex QP solver (simplex_qp.cpp):
// the KKT certificate, the final move onto the simplex, the ratio test of the primal active set and
// the active set on the Cholesky factor of H_FF. Private to the per-ISA kernels.
#pragma once

#include <cstdint>
#include <string>

#include "fastfair/ons.h"

namespace fastfair::cpu::FASTFAIR_ISA {

// The error of an H whose Cholesky pivot at original index `index` is not positive.
std::string not_pd_message(int64_t index);

// Moves p onto the simplex: clamps negatives (rounding residue) and rescales the sum to one.
void to_simplex(double* p, int64_t K);

// The certificate of fastfair/ons.h from r = Hp (overwritten by Hp - b); hmax = max_i |H_ii|.
// A p or Hp with NaN, or a p without support, gets kkt_residual = +inf.
void certify(double* Hp, const double* b, const double* p, int64_t K, double hmax, QpInfo* info);

// The active-set change limit: max_iter, or 10 K + 100 for max_iter <= 0.
int64_t default_max_iter(int64_t max_iter, int64_t K);

// The ratio test of the primal active set: the largest step from the feasible p toward q that
// keeps p >= 0 over the free positions. Returns the blocking position, or -1 for a full step.
int64_t ratio_test(const double* p_free, const double* q, int64_t n, double* step);

// Primal active set on the Cholesky of H_FF, for H a DenseMatrix or a Rank1Updated
// (dense_linalg.h). p (in) is feasible and its zeros start the active set; on return p is the
// minimiser. With bail_on_block, returns at the first blocking step with info->converged = false
// and p untouched (the caller then looks for a better starting support).
template <class M>
Status active_set_direct(const M& H, const double* b, double* p, int64_t max_iter, QpInfo* info,
                         bool bail_on_block = false);

}  // namespace fastfair::cpu::FASTFAIR_ISA
