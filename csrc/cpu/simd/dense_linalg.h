// Private dense linear algebra of the simplex QP and ONS kernels (simplex_qp.cpp, ons_step.cpp):
// row-major [K, K] float64 matrices, fixed summation orders (results independent of the thread
// count), and the Cholesky factor of a principal block kept current while indices join and leave
// it. Included only by files compiled once per ISA level, inside that level's namespace.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace fastfair::cpu::FASTFAIR_ISA {

inline constexpr double kEps = std::numeric_limits<double>::epsilon();
// A pivot below this fraction of its diagonal entry means "not positive definite" (a condition
// number of 1e10 still leaves pivots around 1e-10 of the diagonal).
inline constexpr double kPivotFloor = 64 * kEps;
inline constexpr int64_t kPanel = 32;  // rows per panel of the blocked Cholesky
// Matrix passes run on several threads only from this many rows: below it a pass takes well under
// a millisecond, and a thread descheduled on a busy machine would cost more than the split saves.
inline constexpr int64_t kParallelRows = 2048;

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

// Entry (i, j) of H + beta g g' from h = H_ij: the one expression every reader and writer of a
// pending rank-1 update uses, so that entries formed on the fly and entries stored later agree
// bit for bit (whatever the compiler fuses, it fuses the same way).
inline double rank1_entry(double h, double beta, double gi, double gj) { return h + beta * (gi * gj); }

// Symmetric [K, K] matrices as the solvers read them: a stored row-major H, or H plus a rank-1
// term beta g g' formed entry by entry (the ONS step solves with H + beta g g' before it commits
// the update to H). Both are read through m(i, j) and row sums below.
struct DenseMatrix {
  const double* H;
  int64_t K;
  double operator()(int64_t i, int64_t j) const { return H[i * K + j]; }
};

struct Rank1Updated {
  const double* H;
  int64_t K;
  double beta;
  const double* g;
  double operator()(int64_t i, int64_t j) const { return rank1_entry(H[i * K + j], beta, g[i], g[j]); }
};

// out = M x, one row per iteration. Each row's sum has a fixed order, so the result is
// independent of the thread count. Rows are handed out in small dynamic chunks (here and in the
// ONS passes): on a shared machine a descheduled thread then delays only its own chunk instead of
// half of the matrix.
inline void matvec(const DenseMatrix& M, const double* x, double* out) {
#pragma omp parallel for schedule(dynamic, 32) if (M.K >= kParallelRows)
  for (int64_t i = 0; i < M.K; ++i) out[i] = dot(M.H + i * M.K, x, M.K);
}

inline void matvec(const Rank1Updated& M, const double* x, double* out) {
  const int64_t K = M.K;
#pragma omp parallel for schedule(dynamic, 32) if (K >= kParallelRows)
  for (int64_t i = 0; i < K; ++i) {
    const double* h = M.H + i * K;
    const double gi = M.g[i];
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < K; ++j) s += rank1_entry(h[j], M.beta, gi, M.g[j]) * x[j];
    out[i] = s;
  }
}

template <class M>
double max_diag(const M& m) {
  double d = 0.0;
  for (int64_t i = 0; i < m.K; ++i) d = std::max(d, std::fabs(m(i, i)));
  return d;
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
  template <class M>
  bool factor(const M& H, const std::vector<int64_t>& free, int64_t* bad) {
    idx_ = free;
    n_ = int64_t(free.size());
    const int64_t n = n_, ld = cap_;
    double* U = U_.data();
    for (int64_t i = 0; i < n; ++i) {
      double* u = U + i * ld;
      for (int64_t j = i; j < n; ++j) u[j] = H(free[i], free[j]);
    }
    for (int64_t k0 = 0; k0 < n; k0 += kPanel) {
      const int64_t k1 = std::min(n, k0 + kPanel);
      for (int64_t k = k0; k < k1; ++k) {
        double* uk = U + k * ld;
        const double d = uk[k];
        if (!(d > kPivotFloor * H(free[k], free[k])) || !std::isfinite(d)) {
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
  template <class M>
  bool append(const M& H, int64_t j) {
    const int64_t n = n_, ld = cap_;
    double* U = U_.data();
    std::vector<double>& l = work_;
    l.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) l[i] = H(idx_[i], j);
    forward(l.data());  // U' l = H_{F, j}
    const double hjj = H(j, j);
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

// Cholesky of a small dense SPD matrix M [n, n] in place (lower, row-major); false if not PD.
inline bool small_cholesky(double* M, int64_t n) {
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

inline void small_solve(const double* Lm, int64_t n, double* x) {
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

}  // namespace fastfair::cpu::FASTFAIR_ISA
