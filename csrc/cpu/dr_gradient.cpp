// Memory-bound fills and O(m) scalar work: no per-ISA copies needed.
#include "fastfair/dr_gradient.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace fastfair::cpu {
namespace {

constexpr int64_t kMinParallel = int64_t(1) << 18;  // smaller fills would mostly wait at barriers

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// The round's scalars on responses divided by sigma (see fastfair/dr_gradient.h).
struct Round {
  double sigma;  // power of two >= 1
  double rbar;   // mean(r) / sigma
  double den;    // (1 + mean(r) mu) / sigma
  double r_max;  // max |r|, for messages
  const char* mu_name;
};

// mu: sum of p (dense) or prior_mass (lazy), named mu_name in the error.
Status round_scalars(const double* r, int64_t m, double mu, const char* mu_name, Round* out) {
  double r_max = 0.0;
  for (int64_t j = 0; j < m; ++j) r_max = std::max(r_max, std::fabs(r[j]));
  const double sigma = dr_response_scale(r_max);
  double s = 0.0;
  for (int64_t j = 0; j < m; ++j) s += r[j] / sigma;
  const double rbar = s / double(m);
  const double den = 1.0 / sigma + rbar * mu;
  if (!(den > 0.0))
    return Status::error("1 + mean(responses) * " + std::string(mu_name) +
                         " must be positive (it is the argument of the log in AAggFF's loss); "
                         "got mean(responses) = " + num(rbar * sigma) + ", " + mu_name + " = " +
                         num(mu) + ". AAggFF's responses lie in [C1, C2] with C1 >= 0");
  *out = Round{sigma, rbar, den, r_max, mu_name};
  return Status::success();
}

Status overflow(const char* what, const Round& rd, double sample_prob) {
  return Status::error(std::string(what) + " overflows float64 (responses up to " +
                       num(rd.r_max) + " in magnitude, sample_prob " + num(sample_prob) +
                       ", 1 + mean(responses) * " + rd.mu_name + " = " + num(rd.den * rd.sigma) +
                       "); AAggFF's responses lie in a bounded range [C1, C2] with C1 >= 0");
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
  if (!std::isfinite(mass)) {  // a non-finite entry, or entries whose sum overflows (error path)
    int64_t i = 0;
    while (i < K - 1 && std::isfinite(a.p[i])) ++i;
    return Status::error("p must be finite with a finite sum; got " + num(a.p[i]) +
                         " at position " + std::to_string(i));
  }

  Round rd;
  Status st = round_scalars(a.responses, a.m, mass, "sum(p)", &rd);
  if (!st.ok) return st;
  const double C = a.sample_prob;
  double s = 0.0;
  for (int64_t j = 0; j < a.m; ++j)
    s += a.p[a.ids[j]] * dr_centred(a.responses[j] / rd.sigma, rd.rbar, C, a.variant);
  const double common = rd.rbar * s / (rd.den * rd.den);
  const double g_out = -rd.rbar / rd.den + common;
  // The sampled entries first, into scratch: nothing is written unless all of it is finite.
  std::vector<double> g_in(static_cast<size_t>(a.m)), rhat_in(static_cast<size_t>(a.m));
  bool finite = std::isfinite(g_out);
  for (int64_t j = 0; j < a.m; ++j) {
    const double rhat = rd.rbar + dr_centred(a.responses[j] / rd.sigma, rd.rbar, C, a.variant);
    g_in[j] = -rhat / rd.den + common;
    rhat_in[j] = rhat * rd.sigma;
    finite = finite && std::isfinite(g_in[j]);
    if (a.estimate && !std::isfinite(rhat_in[j])) return overflow("the DR estimate rhat", rd, C);
  }
  if (!finite) return overflow("the DR gradient", rd, C);
  const double rbar = rd.rbar * rd.sigma;
#pragma omp parallel for schedule(static) if (K >= kMinParallel)
  for (int64_t i = 0; i < K; ++i) a.grad[i] = g_out;
  if (a.estimate) {
#pragma omp parallel for schedule(static) if (K >= kMinParallel)
    for (int64_t i = 0; i < K; ++i) a.estimate[i] = rbar;
  }
  for (int64_t j = 0; j < a.m; ++j) {
    a.grad[a.ids[j]] = g_in[j];
    if (a.estimate) a.estimate[a.ids[j]] = rhat_in[j];
  }
  return Status::success();
}

Status dr_lazy_step(const DrLazyArgs& a) {
  if (a.m == 0) return Status::success();
  Round rd;
  Status st = round_scalars(a.responses, a.m, a.prior_mass, "prior_mass", &rd);
  if (!st.ok) return st;
  // The new D[S] in scratch, committed only once every entry is finite.
  std::vector<double> D(static_cast<size_t>(a.m));
  for (int64_t j = 0; j < a.m; ++j) {
    const double old = a.state[a.ids[j]];
    D[j] = old - dr_centred(a.responses[j] / rd.sigma, rd.rbar, a.sample_prob, a.variant) / rd.den;
    if (!std::isfinite(old))
      return Status::error("state must be finite; got " + num(old) + " for client " +
                           std::to_string(a.ids[j]) + " (ids position " + std::to_string(j) + ")");
    if (!std::isfinite(D[j])) return overflow("the DR step delta", rd, a.sample_prob);
  }
  for (int64_t j = 0; j < a.m; ++j) a.state[a.ids[j]] = D[j];
  // q = softmax(-eta D_S), shifted before scaling as in fastfair/softmax.h: with w = sign * D
  // (sign = -sign(eta)) and top = max w, q_j is proportional to exp(|eta| (w_j - top)).
  const double sign = a.eta > 0.0 ? -1.0 : 1.0, abs_eta = std::fabs(a.eta);
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < a.m; ++j) top = std::max(top, sign * D[j]);
  double z = 0.0;
  for (int64_t j = 0; j < a.m; ++j) {
    const double e = abs_eta == 0.0 ? 1.0 : std::exp(abs_eta * (sign * D[j] - top));
    a.weights[j] = e;
    z += e;
  }
  const double inv = 1.0 / z;
  for (int64_t j = 0; j < a.m; ++j) a.weights[j] *= inv;
  return Status::success();
}

}  // namespace fastfair::cpu
