// Simplex-constrained QPs, the generalized (A-norm) projection of ONS (see fastfair/ons.h): the
// exact primal active set on an updated Cholesky factor, and batched FISTA. Compiled once per ISA
// level (see fastfair/cpu_isa.h): the dense loops of dense_linalg.h are what the vector units run.
#include "simplex_qp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dense_linalg.h"
#include "fastfair/simplex.h"

namespace fastfair::cpu::FASTFAIR_ISA {

std::string not_pd_message(int64_t index) {
  return "H is not positive definite (the Cholesky pivot of index " + std::to_string(index) +
         " is not positive); ONS needs H = alpha I + beta A with alpha > 0";
}

void to_simplex(double* p, int64_t K) {
  double s = 0.0, c = 0.0;  // Neumaier-compensated sum
  for (int64_t i = 0; i < K; ++i) {
    const double v = p[i] > 0.0 ? p[i] : 0.0;
    p[i] = v;
    const double t = s + v;
    c += std::fabs(s) >= v ? (s - t) + v : (v - t) + s;
    s = t;
  }
  s += c;
  const double inv = 1.0 / s;
  for (int64_t i = 0; i < K; ++i) p[i] *= inv;
}

void certify(double* Hp, const double* b, const double* p, int64_t K, double hmax, QpInfo* info) {
  const double scale = 1.0 + std::max(hmax, max_abs(b, K));
  double rmax = -std::numeric_limits<double>::infinity(), rmin = -rmax;
  int64_t support = 0;
  for (int64_t i = 0; i < K; ++i) {
    Hp[i] -= b[i];
    if (p[i] > 0.0) {
      rmax = std::max(rmax, Hp[i]);
      rmin = std::min(rmin, Hp[i]);
      ++support;
    }
  }
  const double nu = 0.5 * (rmax + rmin);
  double worst = 0.5 * (rmax - rmin);
  // Maxima that keep a NaN: a p or Hp with NaN (or an empty support) must fail any threshold.
  for (int64_t i = 0; i < K; ++i) {
    const double v = nu - Hp[i];
    if (!(p[i] > 0.0) && !(v <= worst)) worst = v;
  }
  const double off = std::fabs(sum(p, K) - 1.0);
  if (!(off <= worst)) worst = off;
  info->kkt_residual = support > 0 && worst == worst ? worst / scale
                                                     : std::numeric_limits<double>::infinity();
  info->nu = nu;
  info->support_size = support;
}

int64_t default_max_iter(int64_t max_iter, int64_t K) { return max_iter > 0 ? max_iter : 10 * K + 100; }

int64_t ratio_test(const double* p_free, const double* q, int64_t n, double* step) {
  double best = 1.0;
  int64_t block = -1;
  for (int64_t a = 0; a < n; ++a) {
    if (q[a] < 0.0) {
      const double s = p_free[a] > 0.0 ? p_free[a] / (p_free[a] - q[a]) : 0.0;
      if (block < 0 || s < best) { best = s; block = a; }
    }
  }
  *step = best;
  return block;
}

namespace {

// Dual tolerance of the active-set tests: a few ulps of the problem's magnitude.
template <class M>
double dual_tol(const M& H, const double* b) {
  return 1e-13 * (1.0 + max_diag(H) + max_abs(b, H.K));
}

// Iterative refinement of the equality-constrained solution q (H_FF q = b_F + nu 1, 1'q = 1):
// forming q = u + nu v from u = H_FF^{-1} b_F and v = H_FF^{-1} 1 cancels badly when H is
// ill-conditioned; correcting with the directly computed residual restores a backward-stable q.
// v must hold H_FF^{-1} 1; r is scratch of size n.
template <class M>
void refine(const M& H, const double* b, const FreeFactor& fac, const double* v, double* q,
            double* nu, double* r) {
  const int64_t n = fac.size();
  const std::vector<int64_t>& idx = fac.index();
  double bmax = 0.0, hmax = 0.0, qmax = max_abs(q, n);
  for (int64_t a = 0; a < n; ++a) {
    bmax = std::max(bmax, std::fabs(b[idx[a]]));
    hmax = std::max(hmax, std::fabs(H(idx[a], idx[a])));
  }
  const double floor = 4 * kEps * (1.0 + bmax + std::fabs(*nu) + hmax * qmax);
  for (int rep = 0; rep < 3; ++rep) {
    double worst = 0.0;
    for (int64_t a = 0; a < n; ++a) {
      double s = 0.0;
      for (int64_t c = 0; c < n; ++c) s += H(idx[a], idx[c]) * q[c];
      r[a] = b[idx[a]] + *nu - s;
      worst = std::max(worst, std::fabs(r[a]));
    }
    if (worst <= floor) return;
    fac.solve(r);
    const double dnu = (1.0 - sum(q, n) - sum(r, n)) / sum(v, n);
    for (int64_t a = 0; a < n; ++a) q[a] += r[a] + dnu * v[a];
    *nu += dnu;
  }
}

}  // namespace

template <class M>
Status active_set_direct(const M& H, const double* b, double* p, int64_t max_iter, QpInfo* info,
                         bool bail_on_block) {
  const int64_t K = H.K;
  std::vector<int64_t> free;
  for (int64_t i = 0; i < K; ++i)
    if (p[i] > 0.0) free.push_back(i);
  FreeFactor fac(K);
  int64_t bad = -1;
  if (!fac.factor(H, free, &bad)) return Status::error(not_pd_message(bad));
  const double tol = dual_tol(H, b);
  std::vector<double> u(K), v(K), pf(K), r(K);
  std::vector<char> is_free(size_t(K), 0);
  for (int64_t i : free) is_free[i] = 1;
  int64_t iter = 0;
  bool converged = false;
  while (iter <= max_iter) {
    const int64_t n = fac.size();
    const std::vector<int64_t>& idx = fac.index();
    for (int64_t a = 0; a < n; ++a) { u[a] = b[idx[a]]; v[a] = 1.0; pf[a] = p[idx[a]]; }
    fac.solve2(u.data(), v.data());
    double nu = (1.0 - sum(u.data(), n)) / sum(v.data(), n);
    for (int64_t a = 0; a < n; ++a) u[a] += nu * v[a];  // u is now the equality-constrained q_F
    double step = 1.0;
    int64_t block = ratio_test(pf.data(), u.data(), n, &step);
    if (block < 0) {  // a candidate: make it backward stable before trusting its signs
      refine(H, b, fac, v.data(), u.data(), &nu, r.data());
      block = ratio_test(pf.data(), u.data(), n, &step);
    }
    if (block >= 0 && bail_on_block) {
      info->iterations = iter;
      info->converged = false;
      return Status::success();
    }
    if (block >= 0) {
      for (int64_t a = 0; a < n; ++a) p[idx[a]] = std::max(pf[a] + step * (u[a] - pf[a]), 0.0);
      const int64_t j = idx[block];
      p[j] = 0.0;
      is_free[j] = 0;
      fac.remove(block);
      ++iter;
      continue;
    }
    for (int64_t a = 0; a < n; ++a) p[idx[a]] = u[a];
    // Multipliers of the active bounds: mu_j = (Hp)_j - b_j - nu, from the free columns only.
    int64_t enter = -1;
    double most = -tol;
    for (int64_t j = 0; j < K; ++j) {
      if (is_free[j]) continue;
      double s = 0.0;
      for (int64_t a = 0; a < n; ++a) s += H(j, idx[a]) * u[a];
      const double mu = s - b[j] - nu;
      if (mu < most) { most = mu; enter = j; }
    }
    if (enter < 0) { converged = true; break; }
    if (!fac.append(H, enter)) return Status::error(not_pd_message(enter));
    is_free[enter] = 1;
    p[enter] = 0.0;
    ++iter;
  }
  info->iterations = iter;
  info->converged = converged;
  return Status::success();
}

template Status active_set_direct(const DenseMatrix&, const double*, double*, int64_t, QpInfo*,
                                  bool);
template Status active_set_direct(const Rank1Updated&, const double*, double*, int64_t, QpInfo*,
                                  bool);

namespace {

// Starting point of a solve: the given warm start moved onto the simplex, or the centre.
Status starting_point(const double* warm, int64_t K, double* p) {
  if (warm == nullptr) {
    std::fill(p, p + K, 1.0 / double(K));
    return Status::success();
  }
  bool on_simplex = true;
  double s = 0.0;
  for (int64_t i = 0; i < K; ++i) {
    if (!std::isfinite(warm[i]))
      return Status::error("warm_start must be finite; got " + std::to_string(warm[i]) +
                           " at position " + std::to_string(i));
    if (!(warm[i] >= 0.0)) on_simplex = false;
    s += warm[i];
  }
  if (on_simplex && std::fabs(s - 1.0) <= 1e-9 && s > 0.0) {
    std::copy(warm, warm + K, p);
    to_simplex(p, K);
    return Status::success();
  }
  std::vector<double> aux(K);
  return project_simplex_row(warm, K, aux.data(), p);  // cannot fail: warm is finite
}

bool symmetric(const double* H, int64_t K) {
  double hmax = 0.0;
  for (int64_t i = 0; i < K * K; ++i) hmax = std::max(hmax, std::fabs(H[i]));
  const double tol = 1e-12 * hmax;
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = i + 1; j < K; ++j)
      if (!(std::fabs(H[i * K + j] - H[j * K + i]) <= tol)) return false;
  return true;
}

// FISTA with the O'Donoghue-Candes gradient restart, step 1/L with L the Gershgorin bound of
// lambda_max(H), from the centre of the simplex; stopped when L |x_{k+1} - y_k|_inf <= tol * scale
// or, with stable > 0, when the support of x has not changed for `stable` steps. *steps is the
// number of steps; *converged tells whether the tolerance was met. Fails when a step leaves the
// finite range (an H that is zero or not finite).
Status fista_iterate(const DenseMatrix& H, const double* b, int64_t max_iter, double tol,
                     int64_t stable, double* x, int64_t* steps, bool* converged) {
  const int64_t K = H.K;
  double L = 0.0;
  for (int64_t i = 0; i < K; ++i) {
    const double* h = H.H + i * K;
    double s = 0.0;
    for (int64_t j = 0; j < K; ++j) s += std::fabs(h[j]);
    L = std::max(L, s);
  }
  const double scale = 1.0 + std::max(L, max_abs(b, K));
  std::vector<double> y(K, 1.0 / double(K)), grad(K), v(K), xn(K), aux(K);
  std::fill(x, x + K, 1.0 / double(K));
  double t = 1.0;
  int64_t it = 0, unchanged = 0;
  *converged = false;
  while (it < max_iter) {
    ++it;
    matvec(H, y.data(), grad.data());
    for (int64_t i = 0; i < K; ++i) {
      grad[i] -= b[i];
      v[i] = y[i] - grad[i] / L;
    }
    if (!project_simplex_row(v.data(), K, aux.data(), xn.data()).ok)
      return Status::error("a FISTA step is not finite; H must be finite and positive definite "
                           "and b finite");
    double moved = 0.0, restart = 0.0;
    bool same_support = true;
    for (int64_t i = 0; i < K; ++i) {
      moved = std::max(moved, std::fabs(xn[i] - y[i]));
      restart += grad[i] * (xn[i] - x[i]);
      same_support = same_support && ((xn[i] > 0.0) == (x[i] > 0.0));
    }
    if (restart > 0.0) {  // momentum points uphill: restart from the new point
      t = 1.0;
      std::copy(xn.begin(), xn.end(), y.begin());
    } else {
      const double tn = 0.5 * (1.0 + std::sqrt(1.0 + 4.0 * t * t));
      const double beta = (t - 1.0) / tn;
      for (int64_t i = 0; i < K; ++i) y[i] = xn[i] + beta * (xn[i] - x[i]);
      t = tn;
    }
    std::copy(xn.begin(), xn.end(), x);
    if (L * moved <= tol * scale) { *converged = true; break; }
    unchanged = same_support ? unchanged + 1 : 0;
    if (stable > 0 && unchanged >= stable) break;
  }
  *steps = it;
  return Status::success();
}

// FISTA to tolerance, then the support of x is polished: the equality-constrained problem on it
// is solved exactly and kept when its certificate is better.
Status fista_one(const DenseMatrix& H, const double* b, int64_t max_iter, double tol, double* x,
                 QpInfo* info) {
  const int64_t K = H.K;
  bool converged = false;
  int64_t it = 0;
  Status st = fista_iterate(H, b, max_iter, tol, 0, x, &it, &converged);
  if (!st.ok) return st;
  std::vector<double> v(K);
  // Polish on the detected support.
  std::vector<int64_t> free;
  for (int64_t i = 0; i < K; ++i)
    if (x[i] > 0.0) free.push_back(i);
  FreeFactor fac(int64_t(free.size()));
  int64_t bad = -1;
  if (!free.empty() && fac.factor(H, free, &bad)) {
    const int64_t n = int64_t(free.size());
    std::vector<double> u(n), w(n, 1.0);
    for (int64_t a = 0; a < n; ++a) u[a] = b[free[a]];
    fac.solve2(u.data(), w.data());
    const double nu = (1.0 - sum(u.data(), n)) / sum(w.data(), n);
    bool ok = true;
    for (int64_t a = 0; a < n; ++a) {
      u[a] += nu * w[a];
      ok = ok && u[a] >= 0.0;
    }
    if (ok) {
      std::vector<double> q(K, 0.0), r(K);
      for (int64_t a = 0; a < n; ++a) q[free[a]] = u[a];
      to_simplex(q.data(), K);
      matvec(H, q.data(), r.data());
      QpInfo trial;
      certify(r.data(), b, q.data(), K, max_diag(H), &trial);
      std::copy(x, x + K, v.begin());
      matvec(H, v.data(), r.data());
      QpInfo before;
      certify(r.data(), b, v.data(), K, max_diag(H), &before);
      if (trial.kkt_residual <= before.kkt_residual) std::copy(q.begin(), q.end(), x);
    }
  }
  to_simplex(x, K);
  std::vector<double> r(K);
  matvec(H, x, r.data());
  certify(r.data(), b, x, K, max_diag(H), info);
  info->iterations = it;
  info->converged = converged;
  return Status::success();
}

Status solve_one(const DenseMatrix& H, const double* b, const double* warm, int64_t max_iter,
                 double* p, QpInfo* info) {
  const int64_t K = H.K;
  Status st = starting_point(warm, K, p);
  if (!st.ok) return st;
  max_iter = default_max_iter(max_iter, K);
  // A cold start factors all of H (which proves it positive definite) and is done when the
  // minimiser on the hyperplane is already non-negative. Otherwise the primal active set would
  // drop one index per step from K, so projected-gradient steps pick a starting support first.
  st = active_set_direct(H, b, p, max_iter, info, warm == nullptr && K > 16);
  if (!st.ok) return st;
  if (!info->converged && warm == nullptr && K > 16) {
    bool converged = false;
    int64_t steps = 0;
    st = fista_iterate(H, b, std::min<int64_t>(500, max_iter), 1e-12, 10, p, &steps, &converged);
    if (!st.ok) return st;
    st = active_set_direct(H, b, p, max_iter, info);
    if (!st.ok) return st;
  }
  to_simplex(p, K);
  std::vector<double> r(K);
  matvec(H, p, r.data());
  certify(r.data(), b, p, K, max_diag(H), info);
  return Status::success();
}

}  // namespace

Status simplex_qp(const SimplexQpArgs& a, QpInfo* info) {
  if (!symmetric(a.H, a.K)) return Status::error("H must be symmetric; pass (H + H.T) / 2");
  *info = QpInfo{};
  return solve_one(DenseMatrix{a.H, a.K}, a.b, a.warm, a.max_iter, a.p, info);
}

Status simplex_qp_batched(const SimplexQpBatchArgs& a) {
  const int64_t K = a.K;
  std::vector<std::string> errors(size_t(a.batch));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < a.batch; ++k) {
    const DenseMatrix H{a.H + k * K * K, K};
    const double* b = a.b + k * K;
    double* p = a.p + k * K;
    QpInfo info;
    if (a.method != 1 && !symmetric(H.H, K)) {
      errors[k] = "H[" + std::to_string(k) + "] must be symmetric; pass (H + H.T) / 2";
      continue;
    }
    const Status st = a.method == 1
                          ? fista_one(H, b, a.max_iter > 0 ? a.max_iter : 10000, a.tol, p, &info)
                          : solve_one(H, b, nullptr, a.max_iter, p, &info);
    if (!st.ok) {
      errors[k] = "problem " + std::to_string(k) + ": " + st.message;
      continue;
    }
    a.kkt[k] = info.kkt_residual;
    a.iterations[k] = info.iterations;
    a.support[k] = info.support_size;
  }
  for (const std::string& e : errors)
    if (!e.empty()) return Status::error(e);
  return Status::success();
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
