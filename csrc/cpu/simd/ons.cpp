// Simplex-constrained QPs and the Online Newton Step (see fastfair/ons.h). Compiled once per ISA
// level (see fastfair/cpu_isa.h): the dense loops below are what the vector units run.
#include "fastfair/ons.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();
// A pivot below this fraction of its diagonal entry means "not positive definite" (a condition
// number of 1e10 still leaves pivots around 1e-10 of the diagonal).
constexpr double kPivotFloor = 64 * kEps;
constexpr int64_t kPanel = 32;  // rows per panel of the blocked Cholesky
// Matrix passes run on several threads only from this many rows: below it a pass takes well under
// a millisecond, and a thread descheduled on a busy machine would cost more than the split saves.
constexpr int64_t kParallelRows = 2048;

inline double dot(const double* x, const double* y, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i] * y[i];
  return s;
}

inline double sum(const double* x, int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

inline double max_abs(const double* x, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

std::string not_pd_message(int64_t index) {
  return "H is not positive definite (the Cholesky pivot of index " + std::to_string(index) +
         " is not positive); ONS needs H = alpha I + beta A with alpha > 0";
}

// out = H x for a dense [K, K] H, one row per iteration. Each row's sum has a fixed order, so the
// result is independent of the thread count. Rows are handed out in small dynamic chunks (here and
// in the ONS passes): on a shared machine a descheduled thread then delays only its own chunk
// instead of half of the matrix.
void matvec(const double* H, int64_t K, const double* x, double* out) {
#pragma omp parallel for schedule(dynamic, 32) if (K >= kParallelRows)
  for (int64_t i = 0; i < K; ++i) out[i] = dot(H + i * K, x, K);
}

// Moves p onto the simplex: clamps negatives (rounding residue) and rescales the sum to one.
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

// Euclidean projection onto the simplex (Michelot): tau grows and the set {v > tau} shrinks until
// it is stable; each pass is one sum and one count. The CUDA kernel runs the same iteration.
void project_simplex_euclid(const double* v, int64_t K, double* out) {
  double tau = (sum(v, K) - 1.0) / double(K);
  int64_t count = K;
  for (;;) {
    double s = 0.0;
    int64_t c = 0;
    for (int64_t i = 0; i < K; ++i)
      if (v[i] > tau) { s += v[i]; ++c; }
    if (c == count) break;
    count = c;
    tau = (s - 1.0) / double(c);
  }
  for (int64_t i = 0; i < K; ++i) out[i] = std::max(v[i] - tau, 0.0);
}

double max_diag(const double* H, int64_t K) {
  double m = 0.0;
  for (int64_t i = 0; i < K; ++i) m = std::max(m, std::fabs(H[i * K + i]));
  return m;
}

// The certificate of fastfair/ons.h from r = Hp (overwritten by Hp - b); hmax = max_i |H_ii|.
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
  for (int64_t i = 0; i < K; ++i)
    if (!(p[i] > 0.0)) worst = std::max(worst, nu - Hp[i]);
  worst = std::max(worst, std::fabs(sum(p, K) - 1.0));
  info->kkt_residual = worst / scale;
  info->nu = nu;
  info->support_size = support;
}

// Upper Cholesky factor U (H_FF = U'U) of the free block, kept current while indices join and
// leave the free set. Row-major with leading dimension `cap`; entries below the diagonal unused.
class FreeFactor {
 public:
  explicit FreeFactor(int64_t cap) : cap_(cap), U_(size_t(cap) * size_t(cap)) {}

  int64_t size() const { return n_; }
  const std::vector<int64_t>& index() const { return idx_; }

  // Factors H restricted to `free` from scratch (blocked right-looking); false if not PD, with
  // the failing original index in *bad.
  bool factor(const double* H, int64_t K, const std::vector<int64_t>& free, int64_t* bad) {
    idx_ = free;
    n_ = int64_t(free.size());
    const int64_t n = n_, ld = cap_;
    double* U = U_.data();
    for (int64_t i = 0; i < n; ++i) {
      const double* h = H + free[i] * K;
      double* u = U + i * ld;
      for (int64_t j = i; j < n; ++j) u[j] = h[free[j]];
    }
    for (int64_t k0 = 0; k0 < n; k0 += kPanel) {
      const int64_t k1 = std::min(n, k0 + kPanel);
      for (int64_t k = k0; k < k1; ++k) {
        double* uk = U + k * ld;
        const double d = uk[k];
        if (!(d > kPivotFloor * H[free[k] * K + free[k]]) || !std::isfinite(d)) {
          *bad = free[k];
          return false;
        }
        const double r = std::sqrt(d), inv = 1.0 / r;
        uk[k] = r;
        for (int64_t j = k + 1; j < n; ++j) uk[j] *= inv;
        for (int64_t i = k + 1; i < k1; ++i) {
          const double a = uk[i];
          double* ui = U + i * ld;
#pragma omp simd
          for (int64_t j = i; j < n; ++j) ui[j] -= a * uk[j];
        }
      }
      // Trailing rows receive the whole panel at once: each row is read and written once per
      // panel while the panel rows stay in cache.
#pragma omp parallel for schedule(dynamic, 16) if ((n - k1) * (n - k1) >= 65536)
      for (int64_t i = k1; i < n; ++i) {
        double* ui = U + i * ld;
        int64_t k = k0;
        for (; k + 4 <= k1; k += 4) {
          const double *a0 = U + k * ld, *a1 = a0 + ld, *a2 = a1 + ld, *a3 = a2 + ld;
          const double c0 = a0[i], c1 = a1[i], c2 = a2[i], c3 = a3[i];
#pragma omp simd
          for (int64_t j = i; j < n; ++j)
            ui[j] -= (c0 * a0[j] + c1 * a1[j]) + (c2 * a2[j] + c3 * a3[j]);
        }
        for (; k < k1; ++k) {
          const double* a = U + k * ld;
          const double c = a[i];
#pragma omp simd
          for (int64_t j = i; j < n; ++j) ui[j] -= c * a[j];
        }
      }
    }
    return true;
  }

  // Adds original index j as the last free index (bordered factor, O(n^2)); false if not PD.
  bool append(const double* H, int64_t K, int64_t j) {
    const int64_t n = n_, ld = cap_;
    double* U = U_.data();
    std::vector<double>& l = work_;
    l.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) l[i] = H[idx_[i] * K + j];
    forward(l.data());  // U' l = H_{F, j}
    const double hjj = H[j * K + j];
    const double d = hjj - dot(l.data(), l.data(), n);
    if (!(d > kPivotFloor * hjj) || !std::isfinite(d)) return false;
    for (int64_t i = 0; i < n; ++i) U[i * ld + n] = l[i];
    U[n * ld + n] = std::sqrt(d);
    idx_.push_back(j);
    ++n_;
    return true;
  }

  // Removes the free index at position pos: drop row and column pos, then restore the triangle
  // of the trailing block T with the rank-1 update T'T + x x' (x = old row pos), O(n^2).
  void remove(int64_t pos) {
    const int64_t n = n_, ld = cap_;
    double* U = U_.data();
    std::vector<double>& x = work_;
    x.assign(U + pos * ld + pos + 1, U + pos * ld + n);
    for (int64_t i = 0; i < pos; ++i) {
      double* ui = U + i * ld;
      std::memmove(ui + pos, ui + pos + 1, sizeof(double) * size_t(n - 1 - pos));
    }
    for (int64_t i = pos + 1; i < n; ++i)
      std::memmove(U + (i - 1) * ld + (i - 1), U + i * ld + i, sizeof(double) * size_t(n - i));
    const int64_t m = n - 1;
    for (int64_t k = pos; k < m; ++k) {
      double* uk = U + k * ld;
      double* xs = x.data() - pos;  // x indexed by the new column number
      const double ukk = uk[k], xk = xs[k];
      const double r = std::hypot(ukk, xk);
      const double c = r / ukk, s = xk / ukk, cinv = 1.0 / c;
      uk[k] = r;
#pragma omp simd
      for (int64_t j = k + 1; j < m; ++j) {
        const double v = (uk[j] + s * xs[j]) * cinv;
        uk[j] = v;
        xs[j] = c * xs[j] - s * v;
      }
    }
    idx_.erase(idx_.begin() + pos);
    --n_;
  }

  // Solves U'U x = rhs in place for two right-hand sides at once (one read of U).
  void solve2(double* x, double* y) const {
    const int64_t n = n_, ld = cap_;
    const double* U = U_.data();
    for (int64_t i = 0; i < n; ++i) {
      const double* ui = U + i * ld;
      const double xi = x[i] / ui[i], yi = y[i] / ui[i];
      x[i] = xi;
      y[i] = yi;
#pragma omp simd
      for (int64_t k = i + 1; k < n; ++k) {
        x[k] -= ui[k] * xi;
        y[k] -= ui[k] * yi;
      }
    }
    for (int64_t i = n - 1; i >= 0; --i) {
      const double* ui = U + i * ld;
      double sx = 0.0, sy = 0.0;
#pragma omp simd reduction(+ : sx, sy)
      for (int64_t k = i + 1; k < n; ++k) {
        sx += ui[k] * x[k];
        sy += ui[k] * y[k];
      }
      x[i] = (x[i] - sx) / ui[i];
      y[i] = (y[i] - sy) / ui[i];
    }
  }

  // Solves U'U x = rhs in place for one right-hand side.
  void solve(double* x) const {
    const int64_t n = n_, ld = cap_;
    const double* U = U_.data();
    forward(x);
    for (int64_t i = n - 1; i >= 0; --i) {
      const double* ui = U + i * ld;
      x[i] = (x[i] - dot(ui + i + 1, x + i + 1, n - i - 1)) / ui[i];
    }
  }

 private:
  // Forward substitution U' x = rhs in place, row by row of U.
  void forward(double* x) const {
    const int64_t n = n_, ld = cap_;
    const double* U = U_.data();
    for (int64_t i = 0; i < n; ++i) {
      const double* ui = U + i * ld;
      const double xi = x[i] / ui[i];
      x[i] = xi;
#pragma omp simd
      for (int64_t k = i + 1; k < n; ++k) x[k] -= ui[k] * xi;
    }
  }

  int64_t cap_, n_ = 0;
  std::vector<double> U_;
  std::vector<int64_t> idx_;
  std::vector<double> work_;
};

int64_t default_max_iter(int64_t max_iter, int64_t K) { return max_iter > 0 ? max_iter : 10 * K + 100; }

// Dual tolerance of the active-set tests: a few ulps of the problem's magnitude.
double dual_tol(const double* H, const double* b, int64_t K) {
  double hmax = 0.0;
  for (int64_t i = 0; i < K; ++i) hmax = std::max(hmax, std::fabs(H[i * K + i]));
  return 1e-13 * (1.0 + hmax + max_abs(b, K));
}

// The ratio test of the primal active set: the largest step from the feasible p toward q that
// keeps p >= 0 over the free positions. Returns the blocking position, or -1 for a full step.
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

// Iterative refinement of the equality-constrained solution q (H_FF q = b_F + nu 1, 1'q = 1):
// forming q = u + nu v from u = H_FF^{-1} b_F and v = H_FF^{-1} 1 cancels badly when H is
// ill-conditioned; correcting with the directly computed residual restores a backward-stable q.
// v must hold H_FF^{-1} 1; r is scratch of size n.
void refine(const double* H, const double* b, int64_t K, const FreeFactor& fac, const double* v,
            double* q, double* nu, double* r) {
  const int64_t n = fac.size();
  const std::vector<int64_t>& idx = fac.index();
  double bmax = 0.0, hmax = 0.0, qmax = max_abs(q, n);
  for (int64_t a = 0; a < n; ++a) {
    bmax = std::max(bmax, std::fabs(b[idx[a]]));
    hmax = std::max(hmax, std::fabs(H[idx[a] * K + idx[a]]));
  }
  const double floor = 4 * kEps * (1.0 + bmax + std::fabs(*nu) + hmax * qmax);
  for (int rep = 0; rep < 3; ++rep) {
    double worst = 0.0;
    for (int64_t a = 0; a < n; ++a) {
      const double* h = H + idx[a] * K;
      double s = 0.0;
      for (int64_t c = 0; c < n; ++c) s += h[idx[c]] * q[c];
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

// Primal active set on the Cholesky of H_FF. p (in) is feasible and its zeros start the active
// set; on return p is the minimiser.
// With bail_on_block, returns at the first blocking step with info->converged = false and p
// untouched (the caller then looks for a better starting support).
Status active_set_direct(const double* H, const double* b, int64_t K, double* p, int64_t max_iter,
                         QpInfo* info, bool bail_on_block = false) {
  std::vector<int64_t> free;
  for (int64_t i = 0; i < K; ++i)
    if (p[i] > 0.0) free.push_back(i);
  FreeFactor fac(K);
  int64_t bad = -1;
  if (!fac.factor(H, K, free, &bad)) return Status::error(not_pd_message(bad));
  const double tol = dual_tol(H, b, K);
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
      refine(H, b, K, fac, v.data(), u.data(), &nu, r.data());
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
      const double* hj = H + j * K;
      double s = 0.0;
      for (int64_t a = 0; a < n; ++a) s += hj[idx[a]] * u[a];
      const double mu = s - b[j] - nu;
      if (mu < most) { most = mu; enter = j; }
    }
    if (enter < 0) { converged = true; break; }
    if (!fac.append(H, K, enter)) return Status::error(not_pd_message(enter));
    is_free[enter] = 1;
    p[enter] = 0.0;
    ++iter;
  }
  info->iterations = iter;
  info->converged = converged;
  return Status::success();
}

// Starting point of a solve: the given warm start moved onto the simplex, or the centre.
void starting_point(const double* warm, int64_t K, double* p) {
  if (warm == nullptr) {
    std::fill(p, p + K, 1.0 / double(K));
    return;
  }
  bool on_simplex = true;
  double s = 0.0;
  for (int64_t i = 0; i < K; ++i) {
    if (!(warm[i] >= 0.0)) on_simplex = false;
    s += warm[i];
  }
  if (on_simplex && std::fabs(s - 1.0) <= 1e-9 && s > 0.0) {
    std::copy(warm, warm + K, p);
    to_simplex(p, K);
  } else {
    project_simplex_euclid(warm, K, p);
  }
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
// or, with stable > 0, when the support of x has not changed for `stable` steps. Returns the
// number of steps; *converged tells whether the tolerance was met.
int64_t fista_iterate(const double* H, const double* b, int64_t K, int64_t max_iter, double tol,
                      int64_t stable, double* x, bool* converged) {
  double L = 0.0;
  for (int64_t i = 0; i < K; ++i) {
    const double* h = H + i * K;
    double s = 0.0;
    for (int64_t j = 0; j < K; ++j) s += std::fabs(h[j]);
    L = std::max(L, s);
  }
  const double scale = 1.0 + std::max(L, max_abs(b, K));
  std::vector<double> y(K, 1.0 / double(K)), grad(K), v(K), xn(K);
  std::fill(x, x + K, 1.0 / double(K));
  double t = 1.0;
  int64_t it = 0, unchanged = 0;
  *converged = false;
  while (it < max_iter) {
    ++it;
    matvec(H, K, y.data(), grad.data());
    for (int64_t i = 0; i < K; ++i) {
      grad[i] -= b[i];
      v[i] = y[i] - grad[i] / L;
    }
    project_simplex_euclid(v.data(), K, xn.data());
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
  return it;
}

// FISTA to tolerance, then the support of x is polished: the equality-constrained problem on it
// is solved exactly and kept when its certificate is better.
void fista_one(const double* H, const double* b, int64_t K, int64_t max_iter, double tol,
               double* x, QpInfo* info) {
  bool converged = false;
  const int64_t it = fista_iterate(H, b, K, max_iter, tol, 0, x, &converged);
  std::vector<double> v(K);
  // Polish on the detected support.
  std::vector<int64_t> free;
  for (int64_t i = 0; i < K; ++i)
    if (x[i] > 0.0) free.push_back(i);
  FreeFactor fac(int64_t(free.size()));
  int64_t bad = -1;
  if (!free.empty() && fac.factor(H, K, free, &bad)) {
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
      matvec(H, K, q.data(), r.data());
      QpInfo trial;
      certify(r.data(), b, q.data(), K, max_diag(H, K), &trial);
      std::copy(x, x + K, v.begin());
      matvec(H, K, v.data(), r.data());
      QpInfo before;
      certify(r.data(), b, v.data(), K, max_diag(H, K), &before);
      if (trial.kkt_residual <= before.kkt_residual) std::copy(q.begin(), q.end(), x);
    }
  }
  to_simplex(x, K);
  std::vector<double> r(K);
  matvec(H, K, x, r.data());
  certify(r.data(), b, x, K, max_diag(H, K), info);
  info->iterations = it;
  info->converged = converged;
}

Status solve_one(const double* H, const double* b, int64_t K, const double* warm,
                 int64_t max_iter, double* p, QpInfo* info) {
  starting_point(warm, K, p);
  max_iter = default_max_iter(max_iter, K);
  // A cold start factors all of H (which proves it positive definite) and is done when the
  // minimiser on the hyperplane is already non-negative. Otherwise the primal active set would
  // drop one index per step from K, so projected-gradient steps pick a starting support first.
  Status st = active_set_direct(H, b, K, p, max_iter, info, warm == nullptr && K > 16);
  if (!st.ok) return st;
  if (!info->converged && warm == nullptr && K > 16) {
    bool converged = false;
    fista_iterate(H, b, K, std::min<int64_t>(500, max_iter), 1e-12, 10, p, &converged);
    st = active_set_direct(H, b, K, p, max_iter, info);
    if (!st.ok) return st;
  }
  to_simplex(p, K);
  std::vector<double> r(K);
  matvec(H, K, p, r.data());
  certify(r.data(), b, p, K, max_diag(H, K), info);
  return Status::success();
}

// ---------------------------------------------------------------------------------------------
// Online Newton Step.

// One pass over the stored inverse: apply the pending rank-1 correction (A <- A - c u u') and
// return A g, A b and A 1 with the corrected A. The product c * (u_i u_j) keeps A exactly
// symmetric.
void inverse_pass(double* A, int64_t K, double c, const double* u, const double* g,
                  const double* b, double* yg, double* yb, double* y1) {
#pragma omp parallel for schedule(dynamic, 32) if (K >= kParallelRows)
  for (int64_t i = 0; i < K; ++i) {
    double* a = A + i * K;
    double sg = 0.0, sb = 0.0, s1 = 0.0;
    if (c != 0.0) {
      const double ui = u[i];
#pragma omp simd reduction(+ : sg, sb, s1)
      for (int64_t j = 0; j < K; ++j) {
        const double v = a[j] - c * (ui * u[j]);
        a[j] = v;
        sg += v * g[j];
        sb += v * b[j];
        s1 += v;
      }
    } else {
#pragma omp simd reduction(+ : sg, sb, s1)
      for (int64_t j = 0; j < K; ++j) {
        const double v = a[j];
        sg += v * g[j];
        sb += v * b[j];
        s1 += v;
      }
    }
    yg[i] = sg;
    yb[i] = sb;
    y1[i] = s1;
  }
}

// One pass over H: H <- H + beta g g' and, when x is given, out = H x with the updated H.
void hessian_pass(double* H, int64_t K, double beta, const double* g, const double* x, double* out) {
#pragma omp parallel for schedule(dynamic, 32) if (K >= kParallelRows)
  for (int64_t i = 0; i < K; ++i) {
    double* h = H + i * K;
    const double gi = g[i];
    double s = 0.0;
    if (x != nullptr) {
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < K; ++j) {
        const double v = h[j] + beta * (gi * g[j]);
        h[j] = v;
        s += v * x[j];
      }
      out[i] = s;
    } else {
#pragma omp simd
      for (int64_t j = 0; j < K; ++j) h[j] += beta * (gi * g[j]);
    }
  }
}

// Cholesky of a small dense SPD matrix M [n, n] in place (lower, row-major); false if not PD.
bool small_cholesky(double* M, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = M[j * n + j];
    const double d0 = d;
    for (int64_t k = 0; k < j; ++k) d -= M[j * n + k] * M[j * n + k];
    if (!(d > kPivotFloor * d0)) return false;
    d = std::sqrt(d);
    M[j * n + j] = d;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = M[i * n + j];
      for (int64_t k = 0; k < j; ++k) s -= M[i * n + k] * M[j * n + k];
      M[i * n + j] = s / d;
    }
  }
  return true;
}

void small_solve(const double* Lm, int64_t n, double* x) {
  for (int64_t i = 0; i < n; ++i) {
    double s = x[i];
    for (int64_t k = 0; k < i; ++k) s -= Lm[i * n + k] * x[k];
    x[i] = s / Lm[i * n + i];
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    double s = x[i];
    for (int64_t k = i + 1; k < n; ++k) s -= Lm[k * n + i] * x[k];
    x[i] = s / Lm[i * n + i];
  }
}

// Equality-constrained solves on the maintained inverse Hi = A - c u u' (A stored, symmetric)
// for a zero set Z: given w = Hi rhs and w1 = Hi 1, the bound multipliers solve
// (Hi)_ZZ mu_Z = -(w + nu w1)_Z and
//   q = w + nu w1 + (Hi)_{:,Z} mu_Z,   1'q = target fixes nu (1' (Hi)_{:,Z} = (w1_Z)').
// O(K |Z| + |Z|^3) per solve.
class SchurSolver {
 public:
  SchurSolver(const double* A, double c, const double* u, const double* w1, int64_t K)
      : A_(A), c_(c), u_(u), w1_(w1), K_(K), sw1_(sum(w1, K)) {}

  // Factors (Hi)_ZZ; false if that fails (not PD to working precision).
  bool set_zero_set(const std::vector<int64_t>& Z) {
    Z_ = Z;
    const int64_t z = int64_t(Z.size());
    M_.resize(size_t(z * z));
    for (int64_t x = 0; x < z; ++x) {
      const double* row = A_ + Z[x] * K_;
      for (int64_t y = 0; y < z; ++y) M_[x * z + y] = row[Z[y]] - c_ * (u_[Z[x]] * u_[Z[y]]);
    }
    return z == 0 || small_cholesky(M_.data(), z);
  }

  // q (size K, q_Z = 0 exactly), nu and mu_Z for w = Hi rhs.
  void solve(const double* w, double target, double* q, double* nu, std::vector<double>* mu) {
    const int64_t z = int64_t(Z_.size()), K = K_;
    std::vector<double> a(z), cv(z);
    for (int64_t x = 0; x < z; ++x) {
      a[x] = -w[Z_[x]];
      cv[x] = -w1_[Z_[x]];
    }
    if (z > 0) {
      small_solve(M_.data(), z, a.data());
      small_solve(M_.data(), z, cv.data());
    }
    double s0 = sum(w, K), s1 = sw1_;
    for (int64_t x = 0; x < z; ++x) {
      s0 += w1_[Z_[x]] * a[x];
      s1 += w1_[Z_[x]] * cv[x];
    }
    const double n = (target - s0) / s1;
    mu->resize(z);
    double umu = 0.0;
    for (int64_t x = 0; x < z; ++x) {
      (*mu)[x] = a[x] + n * cv[x];
      umu += u_[Z_[x]] * (*mu)[x];
    }
    for (int64_t i = 0; i < K; ++i) q[i] = w[i] + n * w1_[i] - c_ * u_[i] * umu;
    for (int64_t x = 0; x < z; ++x) {  // A_{:,Z} mu_Z through the rows Z (A is symmetric)
      const double* row = A_ + Z_[x] * K;
      const double m = (*mu)[x];
#pragma omp simd
      for (int64_t i = 0; i < K; ++i) q[i] += row[i] * m;
    }
    for (int64_t x = 0; x < z; ++x) q[Z_[x]] = 0.0;
    *nu = n;
  }

  const std::vector<int64_t>& zero_set() const { return Z_; }

 private:
  const double* A_;
  double c_;
  const double *u_, *w1_;
  int64_t K_;
  double sw1_;
  std::vector<int64_t> Z_;
  std::vector<double> M_;
};

// Primal active set on the maintained inverse (see SchurSolver), with wb = Hi b. p (in) is
// feasible and its zeros start Z. Returns false (p untouched) when |Z| would exceed zmax or a
// factorization fails; on success *nu is the multiplier of 1'p = 1.
bool active_set_schur(SchurSolver& solver, const double* wb, int64_t K, double tol, int64_t zmax,
                      int64_t max_iter, double* p, double* nu, QpInfo* info) {
  std::vector<int64_t> Z;
  for (int64_t i = 0; i < K; ++i)
    if (!(p[i] > 0.0)) Z.push_back(i);
  std::vector<double> q(K), cur(p, p + K), mu;
  int64_t iter = 0;
  while (iter <= max_iter) {
    const int64_t z = int64_t(Z.size());
    if (z > zmax || z >= K || !solver.set_zero_set(Z)) return false;
    solver.solve(wb, 1.0, q.data(), nu, &mu);
    // Over all K coordinates: the zero set's have q = 0 and never block.
    double step;
    const int64_t block = ratio_test(cur.data(), q.data(), K, &step);
    if (block >= 0) {
      for (int64_t i = 0; i < K; ++i) cur[i] = std::max(cur[i] + step * (q[i] - cur[i]), 0.0);
      cur[block] = 0.0;
      Z.push_back(block);
      ++iter;
      continue;
    }
    int64_t leave = -1;
    double most = -tol;
    for (int64_t x = 0; x < z; ++x)
      if (mu[x] < most) { most = mu[x]; leave = x; }
    std::copy(q.begin(), q.end(), cur.begin());
    if (leave < 0) {
      std::copy(cur.begin(), cur.end(), p);
      info->iterations = iter;
      info->converged = true;
      return true;
    }
    Z.erase(Z.begin() + leave);
    ++iter;
  }
  return false;
}

}  // namespace

Status simplex_qp(const SimplexQpArgs& a, QpInfo* info) {
  if (!symmetric(a.H, a.K)) return Status::error("H must be symmetric; pass (H + H.T) / 2");
  *info = QpInfo{};
  return solve_one(a.H, a.b, a.K, a.warm, a.max_iter, a.p, info);
}

Status simplex_qp_batched(const SimplexQpBatchArgs& a) {
  const int64_t K = a.K;
  std::vector<std::string> errors(size_t(a.batch));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < a.batch; ++k) {
    const double* H = a.H + k * K * K;
    const double* b = a.b + k * K;
    double* p = a.p + k * K;
    QpInfo info;
    if (a.method == 1) {
      fista_one(H, b, K, a.max_iter > 0 ? a.max_iter : 10000, a.tol, p, &info);
    } else if (!symmetric(H, K)) {
      errors[k] = "H[" + std::to_string(k) + "] must be symmetric; pass (H + H.T) / 2";
      continue;
    } else {
      Status st = solve_one(H, b, K, nullptr, a.max_iter, p, &info);
      if (!st.ok) {
        errors[k] = "problem " + std::to_string(k) + ": " + st.message;
        continue;
      }
    }
    a.kkt[k] = info.kkt_residual;
    a.iterations[k] = info.iterations;
    a.support[k] = info.support_size;
  }
  for (const std::string& e : errors)
    if (!e.empty()) return Status::error(e);
  return Status::success();
}

Status spd_inverse(const double* H, int64_t K, double* Hinv) {
  FreeFactor fac(K);
  std::vector<int64_t> all(K);
  for (int64_t i = 0; i < K; ++i) all[i] = i;
  int64_t bad = -1;
  if (!fac.factor(H, K, all, &bad)) return Status::error(not_pd_message(bad));
  // Column j of H^{-1} solves H x = e_j; rows of the result are written as columns (symmetric).
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t j = 0; j < K; ++j) {
    std::vector<double> x(K, 0.0);
    x[j] = 1.0;
    fac.solve(x.data());
    std::copy(x.begin(), x.end(), Hinv + j * K);
  }
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = i + 1; j < K; ++j) {
      const double m = 0.5 * (Hinv[i * K + j] + Hinv[j * K + i]);
      Hinv[i * K + j] = m;
      Hinv[j * K + i] = m;
    }
  return Status::success();
}

Status ons_step(const OnsStepArgs& s, QpInfo* info) {
  const int64_t K = s.K;
  *info = QpInfo{};
  const int64_t max_iter = default_max_iter(s.max_iter, K);
  std::vector<double> yg(K), yb(K), y1(K), wb(K), w1(K), p(s.p, s.p + K), r(K), d(K);
  inverse_pass(s.Hinv, K, *s.pending_c, s.pending_u, s.g, s.b, yg.data(), yb.data(), y1.data());
  const double lin = s.paper ? s.beta * dot(s.g, s.p, K) - 1.0 : -1.0;
  const double gu = dot(s.g, yg.data(), K);
  const double c = s.beta / (1.0 + s.beta * gu);
  const double ub = dot(yg.data(), s.b, K), u1 = sum(yg.data(), K);
  // Hi_new = Hi - c u u' with u = Hi g;  wb = Hi_new (b + lin g),  w1 = Hi_new 1.
  const double gcoef = lin * (1.0 - c * gu);
  for (int64_t i = 0; i < K; ++i) {
    const double ui = yg[i];
    w1[i] = y1[i] - c * ui * u1;
    wb[i] = yb[i] - c * ui * ub + gcoef * ui;
    s.b[i] += lin * s.g[i];
  }
  std::copy(yg.begin(), yg.end(), s.pending_u);
  *s.pending_c = c;

  double hmax = 0.0;  // max diagonal of the updated H
  for (int64_t i = 0; i < K; ++i)
    hmax = std::max(hmax, s.H[i * K + i] + s.beta * (s.g[i] * s.g[i]));
  const double tol = 1e-13 * (1.0 + hmax + max_abs(s.b, K));
  // Past |Z| ~ K^(2/3) the Schur complement costs more than the Cholesky of H_FF.
  const int64_t zmax = std::max<int64_t>(16, int64_t(std::cbrt(double(K) * double(K))));
  SchurSolver solver(s.Hinv, c, yg.data(), w1.data(), K);
  double nu = 0.0;
  const bool fast = active_set_schur(solver, wb.data(), K, tol, zmax, max_iter, p.data(), &nu, info);
  if (fast) {
    to_simplex(p.data(), K);
    hessian_pass(s.H, K, s.beta, s.g, p.data(), r.data());
    certify(r.data(), s.b, p.data(), K, hmax, info);
    // Iterative refinement against the stored H: the explicit inverse loses cond(H) * eps, the
    // correction (same zero set, residual right-hand side) wins it back.
    for (int rep = 0; rep < 2 && info->kkt_residual > 64 * kEps; ++rep) {
      for (int64_t i = 0; i < K; ++i) r[i] = p[i] > 0.0 ? nu - r[i] : 0.0;  // r held Hp - b
      matvec(s.Hinv, K, r.data(), d.data());
      const double ur = dot(yg.data(), r.data(), K);
      for (int64_t i = 0; i < K; ++i) d[i] -= c * yg[i] * ur;
      double dnu = 0.0;
      std::vector<double> mu;
      solver.solve(d.data(), 1.0 - sum(p.data(), K), r.data(), &dnu, &mu);
      for (int64_t i = 0; i < K; ++i) p[i] += r[i];
      nu += dnu;
      to_simplex(p.data(), K);
      matvec(s.H, K, p.data(), r.data());
      const int64_t iters = info->iterations;
      certify(r.data(), s.b, p.data(), K, hmax, info);
      info->iterations = iters;
    }
    if (info->kkt_residual <= s.tol) {
      std::copy(p.begin(), p.end(), s.p);
      return Status::success();
    }
  } else {
    hessian_pass(s.H, K, s.beta, s.g, nullptr, nullptr);
  }
  // Direct path: Cholesky of H_FF on the stored H, warm-started from the previous decision.
  std::copy(s.p, s.p + K, p.begin());
  Status st = active_set_direct(s.H, s.b, K, p.data(), max_iter, info);
  if (!st.ok) return st;
  to_simplex(p.data(), K);
  matvec(s.H, K, p.data(), r.data());
  certify(r.data(), s.b, p.data(), K, hmax, info);
  if (fast) {
    // The fast path failed its certificate even after refinement: rebuild the inverse from H.
    st = spd_inverse(s.H, K, s.Hinv);
    if (!st.ok) return st;
    *s.pending_c = 0.0;
    info->refactorizations = 1;
  }
  std::copy(p.begin(), p.end(), s.p);
  return Status::success();
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
