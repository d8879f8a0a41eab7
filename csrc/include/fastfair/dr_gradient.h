// AAggFF-D's doubly-robust (DR) gradient (docs/algorithms.md §2.5.2-§2.5.7).
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
//
// Range. The gradient is defined where den > 0 (den is the argument of the log in AAggFF's loss
// -log(1 + <p, r>); with responses in [C1, C2], C1 >= 0, den >= 1). It is scale-free for large
// responses (g and delta are ratios of quantities that grow with r), so both backends compute on
// r / sigma, sigma a power of two >= 1 with max |r| < 2 sigma (dr_response_scale): exact, so the
// results are bit for bit the unscaled formulas wherever those stay finite, and finite for any
// finite responses unless the true value itself leaves the float64 range (den near 0, or rhat =
// r / C beyond 1.8e308). The CPU kernels reject den <= 0 and non-finite results before writing
// anything; CUDA ones write what comes out (inspecting would synchronise).
#pragma once

#include <cmath>
#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

enum class DrVariant : int { paper = 0, reference_code = 1 };

// sigma for responses of largest magnitude max_abs_response: 1 up to 1, else the power of two
// with max_abs_response / sigma in [1, 2) (responses are never scaled up, which could overflow
// 1 / sigma, and 2^1023 is the largest power of two below the float64 maximum).
FASTFAIR_HD double dr_response_scale(double max_abs_response) {
  if (!(max_abs_response > 1.0)) return 1.0;
  int e = 0;
  frexp(max_abs_response, &e);  // max_abs_response = f 2^e, f in [0.5, 1)
  return ldexp(1.0, e - 1);
}

// (rhat_i - rbar) / sigma of a sampled client from r_i / sigma and rbar / sigma, sample_prob c.
FASTFAIR_HD double dr_centred(double r, double rbar, double c, DrVariant v) {
  return v == DrVariant::paper ? (r - rbar) / c : (r - rbar) / c - rbar;
}

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
