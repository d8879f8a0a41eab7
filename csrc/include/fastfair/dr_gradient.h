// AAggFF-D's doubly-robust (DR) gradient (spec aaggff_fedevg_superfed.md, sections 2.5.2-2.5.7).
//
// Round inputs: the sampled ids S (m distinct), their responses r_S, the sampling probability C,
// the previous decision p (dense form) or its total mass (lazy form).
//
//   rbar = mean(r_S),  den = 1 + rbar * sum_j p_j
//   paper:           rhat_i = rbar (i not in S),  rbar + (r_i - rbar) / C  (i in S)
//   reference_code:  rhat_i = rbar (i not in S),  (r_i - rbar) / C         (i in S)
//   s = sum_{j in S} p_j (rhat_j - rbar)
//   g_i = -rhat_i / den + rbar * s / den^2                        (linearised gradient, eq. 3.11)
//
// Dense form: writes g (and rhat) for all K clients, O(K).
// Lazy form, O(m): g = c * 1 + sum_{i in S} delta_i e_i with delta_i = -(rhat_i - rbar) / den, and
// the constant c cancels in softmax(-eta * G); so the state D = G - (sum of the c's) is updated
// only on S, D[S] += delta, and the aggregation weights q_S = softmax(-eta * D[S]) need D[S] alone.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

enum class DrVariant : int { paper = 0, reference_code = 1 };

struct DrDenseArgs {
  int64_t num_clients;        // K
  int64_t m;                  // |S|
  const int64_t* ids;         // [m] distinct, in [0, K)
  const double* responses;    // [m] r_S
  const double* p;            // [K] previous decision p^(t)
  double sample_prob;         // C in (0, 1]
  DrVariant variant;
  double* grad;               // [K] out: g
  double* estimate;           // optional [K] out: rhat
  double* workspace;          // CUDA only: dr_dense_workspace_len(K) doubles of device memory
};

struct DrLazyArgs {
  int64_t num_clients;        // K
  int64_t m;
  const int64_t* ids;
  const double* responses;
  double sample_prob;         // C
  double eta;                 // learning rate of this round's decision
  double prior_mass;          // sum_j p_j^(t): 1 on the simplex (C * K in the authors' round 1)
  DrVariant variant;
  double* state;              // [K] D, updated on S only
  double* weights;            // [m] out: q_S
};

constexpr int64_t kDrBlock = int64_t(1) << 16;
inline int64_t dr_dense_workspace_len(int64_t num_clients) {
  return (num_clients + kDrBlock - 1) / kDrBlock + 4;
}

namespace cpu {
Status dr_gradient(const DrDenseArgs& args);
Status dr_lazy_step(const DrLazyArgs& args);
}  // namespace cpu

namespace cuda {
Status dr_gradient(const DrDenseArgs& args, void* stream);
Status dr_lazy_step(const DrLazyArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
