// Memory-bound fills and O(m) scalar work: no per-ISA copies needed.
#include "fastfair/dr_gradient.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace fastfair::cpu {
namespace {

constexpr int64_t kMinParallel = int64_t(1) << 18;  // smaller fills would mostly wait at barriers

double mean(const double* r, int64_t m) {
  double s = 0.0;
  for (int64_t j = 0; j < m; ++j) s += r[j];
  return s / double(m);
}

// rhat_i - rbar for a sampled client.
double centred_estimate(double r, double rbar, double c, DrVariant v) {
  return v == DrVariant::paper ? (r - rbar) / c : (r - rbar) / c - rbar;
}

}  // namespace

Status dr_gradient(const DrDenseArgs& a) {
  const int64_t K = a.num_clients;
  // sum p in fixed blocks combined in order: independent of the thread count.
  const int64_t nb = (K + kDrBlock - 1) / kDrBlock;
  std::vector<double> part(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static) if (K >= kMinParallel)
  for (int64_t b = 0; b < nb; ++b) {
    double s = 0.0;
    for (int64_t i = b * kDrBlock, e = std::min(K, (b + 1) * kDrBlock); i < e; ++i) s += a.p[i];
    part[b] = s;
  }
  double mass = 0.0;
  for (double s : part) mass += s;

  const double rbar = mean(a.responses, a.m);
  const double den = 1.0 + rbar * mass;
  double s = 0.0;
  for (int64_t j = 0; j < a.m; ++j)
    s += a.p[a.ids[j]] * centred_estimate(a.responses[j], rbar, a.sample_prob, a.variant);
  const double common = rbar * s / (den * den);
  const double g_out = -rbar / den + common;
#pragma omp parallel for schedule(static) if (K >= kMinParallel)
  for (int64_t i = 0; i < K; ++i) a.grad[i] = g_out;
  if (a.estimate) {
#pragma omp parallel for schedule(static) if (K >= kMinParallel)
    for (int64_t i = 0; i < K; ++i) a.estimate[i] = rbar;
  }
  for (int64_t j = 0; j < a.m; ++j) {
    const double rhat = rbar + centred_estimate(a.responses[j], rbar, a.sample_prob, a.variant);
    a.grad[a.ids[j]] = -rhat / den + common;
    if (a.estimate) a.estimate[a.ids[j]] = rhat;
  }
  return Status::success();
}

Status dr_lazy_step(const DrLazyArgs& a) {
  if (a.m == 0) return Status::success();
  const double rbar = mean(a.responses, a.m);
  const double den = 1.0 + rbar * a.prior_mass;
  for (int64_t j = 0; j < a.m; ++j)
    a.state[a.ids[j]] -= centred_estimate(a.responses[j], rbar, a.sample_prob, a.variant) / den;
  double zmax = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < a.m; ++j) zmax = std::max(zmax, -a.eta * a.state[a.ids[j]]);
  double z = 0.0;
  for (int64_t j = 0; j < a.m; ++j) {
    const double e = std::exp(-a.eta * a.state[a.ids[j]] - zmax);
    a.weights[j] = e;
    z += e;
  }
  const double inv = 1.0 / z;
  for (int64_t j = 0; j < a.m; ++j) a.weights[j] *= inv;
  return Status::success();
}

}  // namespace fastfair::cpu
