// Condat's projection is a sequential scan with data-dependent branches: no per-ISA copies.
#include "fastfair/simplex.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace fastfair::cpu {
namespace {

// Condat's algorithm on one row (his published reference code, in float64) applied to y - max y:
// the projection is shift invariant, and with the largest entry at 0 the differences y - tau stay
// exact even for |y| near 1e30. `aux` has K slots. Returns tau of the shifted row and sets *shift;
// *bad_pos is -1 unless a non-finite entry was met.
template <typename T>
double condat_tau(const T* y, int64_t n, double* aux, int64_t* bad_pos, double* shift) {
  *bad_pos = -1;
  double top = double(y[0]);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(double(y[i]))) {
      *bad_pos = i;
      return 0.0;
    }
    top = std::max(top, double(y[i]));
  }
  *shift = top;
  double* aux0 = aux;
  int64_t len = 1, len_old = -1;
  double tau = (aux[0] = double(y[0]) - top) - 1.0;
  for (int64_t i = 1; i < n; ++i) {
    const double yi = double(y[i]) - top;
    if (yi > tau) {
      aux[len] = yi;
      tau += (yi - tau) / double(len - len_old);
      if (tau <= yi - 1.0) {  // yi alone beats the current support: restart from it
        tau = yi - 1.0;
        len_old = len - 1;
      }
      ++len;
    }
  }
  if (len_old >= 0) {  // revisit the values set aside at each restart
    len -= ++len_old;
    aux += len_old;
    while (--len_old >= 0)
      if (aux0[len_old] > tau) {
        *(--aux) = aux0[len_old];
        tau += (aux0[len_old] - tau) / double(++len);
      }
  }
  do {  // drop support values at or below tau until none is left
    len_old = len - 1;
    len = 0;
    for (int64_t i = 0; i <= len_old; ++i) {
      if (aux[i] > tau)
        aux[len++] = aux[i];
      else
        tau += (tau - aux[i]) / double(len_old - i + len);
    }
  } while (len <= len_old);
  // The running tau carries the rounding of every update; recompute it from the support.
  double s = 0.0;
  for (int64_t i = 0; i < len; ++i) s += aux[i];
  return (s - 1.0) / double(len);
}

std::string not_finite(double value, const std::string& position) {
  return "v must be finite; got " + std::to_string(value) + " at position " + position;
}

template <typename T>
Status run(const SimplexArgs& a) {
  const int64_t B = a.rows, K = a.cols;
  std::vector<double> tau(B), shift(B);
  std::vector<int64_t> bad(B, -1);
  auto row = [&](int64_t b) { return static_cast<const T*>(a.v) + b * a.v_stride; };
#pragma omp parallel if (B > 1)
  {
    std::vector<double> aux;
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < B; ++b) {
      if (aux.empty()) aux.resize(static_cast<size_t>(K));
      tau[b] = condat_tau(row(b), K, aux.data(), &bad[b], &shift[b]);
    }
  }
  for (int64_t b = 0; b < B; ++b)
    if (bad[b] >= 0) {
      const std::string pos = B > 1 ? "[" + std::to_string(b) + ", " + std::to_string(bad[b]) + "]"
                                    : std::to_string(bad[b]);
      return Status::error(not_finite(double(row(b)[bad[b]]), pos));
    }
  T* out = static_cast<T*>(a.out);
#pragma omp parallel for schedule(static) collapse(2) if (B * K >= (int64_t(1) << 18))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < K; ++i) {
      const double d = (double(row(b)[i]) - shift[b]) - tau[b];
      out[b * K + i] = T(d > 0.0 ? d : 0.0);
    }
  return Status::success();
}

}  // namespace

Status project_simplex(const SimplexArgs& a) {
  return a.dtype == DType::f64 ? run<double>(a) : run<float>(a);
}

Status project_simplex_row(const double* v, int64_t K, double* aux, double* out) {
  int64_t bad = -1;
  double shift = 0.0;
  const double tau = condat_tau(v, K, aux, &bad, &shift);
  if (bad >= 0) return Status::error(not_finite(v[bad], std::to_string(bad)));
  for (int64_t i = 0; i < K; ++i) {
    const double d = (v[i] - shift) - tau;
    out[i] = d > 0.0 ? d : 0.0;
  }
  return Status::success();
}

}  // namespace fastfair::cpu
