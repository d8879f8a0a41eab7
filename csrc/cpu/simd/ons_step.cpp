// The Online Newton Step round (see fastfair/ons.h): the H and maintained-inverse passes, the
// projection on the zero set through the Schur complement of the inverse, and the fallback to the
// active set on the Cholesky factor of H_FF (simplex_qp.h). Compiled once per ISA level.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dense_linalg.h"
#include "fastfair/ons.h"
#include "simplex_qp.h"

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

// Entry (i, j) of the stored inverse A after its pending correction A - c u u': the one expression
// of the step's pass and of ons_settle(), so that settling early changes no bit. The product
// c * (u_i u_j) keeps A exactly symmetric.
inline double corrected(double a, double c, double ui, double uj) { return a - c * (ui * uj); }

// One pass over the stored inverse: apply the pending rank-1 correction (A <- A - c u u') and
// return A g, A b and A 1 with the corrected A.
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
        const double v = corrected(a[j], c, ui, u[j]);
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

bool any_nonzero(const double* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (v[i] != 0.0) return true;
  return false;
}

// One pass over H that settles the pending term of the previous round (H <- H + beta pg pg',
// stored; pg null: none) and, when x is given, returns out = (H + beta g g') x with this round's
// term formed on the fly: H itself takes g only once the round has succeeded (as the next
// round's pending term), so a round that fails leaves H as it logically was.
void hessian_pass(double* H, int64_t K, double beta, const double* pg, const double* g,
                  const double* x, double* out) {
#pragma omp parallel for schedule(dynamic, 32) if (K >= kParallelRows)
  for (int64_t i = 0; i < K; ++i) {
    double* h = H + i * K;
    double s = 0.0;
    if (pg != nullptr && x != nullptr) {
      const double pgi = pg[i], gi = g[i];
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < K; ++j) {
        const double v = rank1_entry(h[j], beta, pgi, pg[j]);
        h[j] = v;
        s += rank1_entry(v, beta, gi, g[j]) * x[j];
      }
    } else if (pg != nullptr) {
      const double pgi = pg[i];
#pragma omp simd
      for (int64_t j = 0; j < K; ++j) h[j] = rank1_entry(h[j], beta, pgi, pg[j]);
    } else if (x != nullptr) {
      const double gi = g[i];
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < K; ++j) s += rank1_entry(h[j], beta, gi, g[j]) * x[j];
    }
    if (x != nullptr) out[i] = s;
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
      for (int64_t y = 0; y < z; ++y) M_[x * z + y] = corrected(row[Z[y]], c_, u_[Z[x]], u_[Z[y]]);
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

// H^{-1} of a symmetric positive definite H [K, K] through its Cholesky factor (exactly
// symmetric); Hinv is written only once the factor exists.
template <class M>
Status spd_inverse(const M& H, double* Hinv) {
  const int64_t K = H.K;
  FreeFactor fac(K);
  std::vector<int64_t> all(K);
  for (int64_t i = 0; i < K; ++i) all[i] = i;
  int64_t bad = -1;
  if (!fac.factor(H, all, &bad)) return Status::error(not_pd_message(bad));
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

// The error of a failed factor of H + beta g g': mathematically positive definite (>= alpha I),
// numerically not, since beta g g' swamps alpha in float64.
Status singular() {
  return Status::error("g is too large for the state: H + beta g g' is not numerically positive "
                       "definite (beta g g' swamps alpha I in float64; a Cholesky pivot vanishes); "
                       "the state is unchanged");
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

Status ons_step(const OnsStepArgs& s, QpInfo* info) {
  const int64_t K = s.K;
  *info = QpInfo{};
  const int64_t max_iter = default_max_iter(s.max_iter, K);
  // Validation, O(K), before anything changes: the new b and the new diagonal of H must be finite
  // (H stays positive definite, so its off-diagonal entries are then bounded too).
  for (int64_t i = 0; i < K; ++i)
    if (!std::isfinite(s.g[i]))
      return Status::error("g must be finite; got " + num(s.g[i]) + " at position " +
                           std::to_string(i));
  const double lin = s.paper ? s.beta * dot(s.g, s.p, K) - 1.0 : -1.0;
  std::vector<double> b(K);  // b + lin g, committed at the end
  double hmax = 0.0;         // max diagonal of the new H
  for (int64_t i = 0; i < K; ++i) {
    b[i] = s.b[i] + lin * s.g[i];
    const double hii = rank1_entry(rank1_entry(s.H[i * K + i], s.beta, s.pending_g[i],
                                               s.pending_g[i]), s.beta, s.g[i], s.g[i]);
    if (!std::isfinite(hii) || !std::isfinite(b[i]))
      return Status::error("g is too large for the state: " +
                           std::string(std::isfinite(hii) ? "b + s g" : "H + beta g g'") +
                           " overflows float64 at position " + std::to_string(i) + " (g = " +
                           num(s.g[i]) + ", beta = " + num(s.beta) + ")");
    hmax = std::max(hmax, hii);
  }

  // From here on the state changes only in representation until the commit at the end: the
  // passes settle the previous round's pending terms into the stored H and inverse (and zero
  // them), which leaves H and H^{-1} as they logically were; everything new lives in locals.
  std::vector<double> yg(K), yb(K), y1(K), wb(K), w1(K), p(s.p, s.p + K), r(K), d(K);
  inverse_pass(s.Hinv, K, *s.pending_c, s.pending_u, s.g, s.b, yg.data(), yb.data(), y1.data());
  *s.pending_c = 0.0;
  const double gu = dot(s.g, yg.data(), K);
  const double c = s.beta / (1.0 + s.beta * gu);
  const double ub = dot(yg.data(), s.b, K), u1 = sum(yg.data(), K);
  // Hi_new = Hi - c u u' with u = Hi g;  wb = Hi_new (b + lin g),  w1 = Hi_new 1.
  const double gcoef = lin * (1.0 - c * gu);
  for (int64_t i = 0; i < K; ++i) {
    const double ui = yg[i];
    w1[i] = y1[i] - c * ui * u1;
    wb[i] = yb[i] - c * ui * ub + gcoef * ui;
  }
  const double* pending_g = any_nonzero(s.pending_g, K) ? s.pending_g : nullptr;
  const Rank1Updated H{s.H, K, s.beta, s.g};  // H_new, read through the stored H

  const double tol = 1e-13 * (1.0 + hmax + max_abs(b.data(), K));
  // Past |Z| ~ K^(2/3) the Schur complement costs more than the Cholesky of H_FF.
  const int64_t zmax = std::max<int64_t>(16, int64_t(std::cbrt(double(K) * double(K))));
  SchurSolver solver(s.Hinv, c, yg.data(), w1.data(), K);
  double nu = 0.0;
  const bool fast = active_set_schur(solver, wb.data(), K, tol, zmax, max_iter, p.data(), &nu, info);
  bool rebuilt = false;
  if (fast) {
    to_simplex(p.data(), K);
    hessian_pass(s.H, K, s.beta, pending_g, s.g, p.data(), r.data());
    std::fill(s.pending_g, s.pending_g + K, 0.0);
    certify(r.data(), b.data(), p.data(), K, hmax, info);
    // Iterative refinement against H: the explicit inverse loses cond(H) * eps, the correction
    // (same zero set, residual right-hand side) wins it back.
    for (int rep = 0; rep < 2 && info->kkt_residual > 64 * kEps; ++rep) {
      for (int64_t i = 0; i < K; ++i) r[i] = p[i] > 0.0 ? nu - r[i] : 0.0;  // r held Hp - b
      matvec(DenseMatrix{s.Hinv, K}, r.data(), d.data());
      const double ur = dot(yg.data(), r.data(), K);
      for (int64_t i = 0; i < K; ++i) d[i] -= c * yg[i] * ur;
      double dnu = 0.0;
      std::vector<double> mu;
      solver.solve(d.data(), 1.0 - sum(p.data(), K), r.data(), &dnu, &mu);
      for (int64_t i = 0; i < K; ++i) p[i] += r[i];
      nu += dnu;
      to_simplex(p.data(), K);
      matvec(H, p.data(), r.data());
      const int64_t iters = info->iterations;
      certify(r.data(), b.data(), p.data(), K, hmax, info);
      info->iterations = iters;
    }
  } else {
    hessian_pass(s.H, K, s.beta, pending_g, s.g, nullptr, nullptr);
    std::fill(s.pending_g, s.pending_g + K, 0.0);
  }
  if (!fast || !(info->kkt_residual <= s.tol)) {  // a NaN certificate fails too
    // Direct path: Cholesky of H_FF, warm-started from the previous decision.
    std::copy(s.p, s.p + K, p.begin());
    Status st = active_set_direct(H, b.data(), p.data(), max_iter, info);
    if (!st.ok) return singular();
    to_simplex(p.data(), K);
    matvec(H, p.data(), r.data());
    certify(r.data(), b.data(), p.data(), K, hmax, info);
    if (fast) {
      // The fast path failed its certificate even after refinement: rebuild the inverse from H
      // (the last step that can fail; it writes Hinv only once H_new has been factored).
      st = spd_inverse(H, s.Hinv);
      if (!st.ok) return singular();
      rebuilt = true;
      info->refactorizations = 1;
    }
  }
  // Commit: this round's terms become the pending ones of the next round.
  std::copy(b.begin(), b.end(), s.b);
  std::copy(p.begin(), p.end(), s.p);
  std::copy(s.g, s.g + K, s.pending_g);
  if (!rebuilt) {
    std::copy(yg.begin(), yg.end(), s.pending_u);
    *s.pending_c = c;
  }
  return Status::success();
}

Status ons_settle(const OnsSettleArgs& s) {
  const int64_t K = s.K;
  const double c = *s.pending_c;
  if (c != 0.0) {
#pragma omp parallel for schedule(dynamic, 32) if (K >= kParallelRows)
    for (int64_t i = 0; i < K; ++i) {
      double* a = s.Hinv + i * K;
      const double ui = s.pending_u[i];
#pragma omp simd
      for (int64_t j = 0; j < K; ++j) a[j] = corrected(a[j], c, ui, s.pending_u[j]);
    }
  }
  *s.pending_c = 0.0;
  if (any_nonzero(s.pending_g, K)) hessian_pass(s.H, K, s.beta, s.pending_g, nullptr, nullptr, nullptr);
  std::fill(s.pending_g, s.pending_g + K, 0.0);
  return Status::success();
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
