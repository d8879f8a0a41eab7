// Compiled once per ISA level (see fastfair/cpu_isa.h). The loops use GCC vector types
// (vector_size): GCC does not vectorise float max reductions without -ffast-math, and the
// explicit form keeps the whole per-element path (load, max, exp, float64 sum) in registers.
#include "fastfair/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "fastfair/fast_exp.h"
#include "fastfair/simd_width.h"

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

typedef float VF __attribute__((vector_size(kVecBytes)));
typedef float VFHalf __attribute__((vector_size(kVecBytes / 2)));
typedef uint32_t VU32 __attribute__((vector_size(kVecBytes)));
typedef double VD __attribute__((vector_size(kVecBytes)));
typedef uint64_t VU64 __attribute__((vector_size(kVecBytes)));

template <typename T>
struct Vec;
template <>
struct Vec<float> {
  using V = VF;
  static constexpr int W = kVecBytes / 4;
  template <bool exact_zero>
  [[gnu::always_inline]] static inline V exp2(V y) {
    return detail::exp2_neg_f32<VF, VU32, exact_zero>(y);
  }
  // Adds the lanes to two float64 accumulators (low half, high half).
  [[gnu::always_inline]] static inline void widen_add(V e, VD* acc) {
    VFHalf lo, hi;
    std::memcpy(&lo, &e, sizeof(VFHalf));
    std::memcpy(&hi, reinterpret_cast<const char*>(&e) + sizeof(VFHalf), sizeof(VFHalf));
    acc[0] += __builtin_convertvector(lo, VD);
    acc[1] += __builtin_convertvector(hi, VD);
  }
};
template <>
struct Vec<double> {
  using V = VD;
  static constexpr int W = kVecBytes / 8;
  template <bool exact_zero>
  [[gnu::always_inline]] static inline V exp2(V y) {
    return detail::exp2_neg_f64<VD, VU64, exact_zero>(y);
  }
  [[gnu::always_inline]] static inline void widen_add(V e, VD* acc) { acc[0] += e; }
};

template <typename V, typename T>
[[gnu::always_inline]] inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// Stores a vector of T as To (the same lane count).
template <typename To, typename V>
[[gnu::always_inline]] inline void store(To* p, V v) {
  constexpr int W = sizeof(V) / sizeof(v[0]);
  typedef To Out __attribute__((vector_size(W * sizeof(To))));
  const Out o = __builtin_convertvector(v, Out);
  std::memcpy(p, &o, sizeof(Out));
}

constexpr int64_t kChunk = 2048;
constexpr int64_t kMinParallel = int64_t(1) << 18;  // x + add of one chunk is staged in L1 between max and exp

struct Partial {
  double max;  // -inf when every z of the block is -inf
  double sum;  // sum exp(z - max)
  bool nan;
};

template <typename T>
struct Row {
  T* x;
  const T* add;
  T scale;
};

// Max of z = s * v over a chunk of v (s * max v for s > 0, s * min v for s < 0: rounding is
// monotone, so this is exactly the max of the rounded products). NaN entries are skipped here;
// they surface as a NaN sum. Four accumulators hide the latency of the max.
template <typename T>
T chunk_max(const T* v, int64_t len, T s) {
  using V = typename Vec<T>::V;
  constexpr int W = Vec<T>::W;
  const T inf = std::numeric_limits<T>::infinity();
  if (s == T(0)) return len > 0 ? T(0) : -inf;
  const T sign = s > T(0) ? T(1) : T(-1);  // max of sign * v
  V mx[4];
  for (auto& x : mx) x = detail::splat<V>(-inf);
  int64_t j = 0;
  for (; j + 4 * W <= len; j += 4 * W)
    for (int u = 0; u < 4; ++u) {
      const V a = load<V>(v + j + u * W) * sign;
      mx[u] = a > mx[u] ? a : mx[u];
    }
  for (; j + W <= len; j += W) {
    const V a = load<V>(v + j) * sign;
    mx[0] = a > mx[0] ? a : mx[0];
  }
  T hi = -inf;
  for (int u = 0; u < 4; ++u)
    for (int l = 0; l < W; ++l) hi = mx[u][l] > hi ? mx[u][l] : hi;
  for (; j < len; ++j) hi = sign * v[j] > hi ? sign * v[j] : hi;
  return hi == -inf ? -inf : s * (sign * hi);
}

// sum exp(s * v - m) over a chunk, accumulated in float64: four vectors of exponentials are added
// in the input precision (three roundings of terms <= 1) before each widening add.
template <typename T>
double chunk_sum(const T* v, int64_t len, T s, T m) {
  using VT = Vec<T>;
  using V = typename VT::V;
  constexpr int W = VT::W;
  const T log2e = T(detail::kLog2e);
  VD acc[2] = {};
  int64_t j = 0;
  for (; j + 4 * W <= len; j += 4 * W) {
    V e[4];
    for (int u = 0; u < 4; ++u)
      e[u] = VT::template exp2<false>((load<V>(v + j + u * W) * s - m) * log2e);
    VT::widen_add((e[0] + e[1]) + (e[2] + e[3]), acc);
  }
  for (; j + W <= len; j += W) VT::widen_add(VT::template exp2<false>((load<V>(v + j) * s - m) * log2e), acc);
  double tail = 0.0;
  for (; j < len; ++j) tail += double(detail::exp2_neg<false>(T((v[j] * s - m) * log2e)));
  const VD a = acc[0] + acc[1];
  double total = 0.0;
  for (int l = 0; l < kVecBytes / 8; ++l) total += a[l];
  return total + tail;
}

template <typename T>
Partial pass1(const Row<T>& r, int64_t begin, int64_t end) {
  alignas(64) T buf[kChunk];
  Partial p{-std::numeric_limits<double>::infinity(), 0.0, false};
  const T inf = std::numeric_limits<T>::infinity();
  T m = -inf;
  for (int64_t c = begin; c < end; c += kChunk) {
    const int64_t len = std::min(kChunk, end - c);
    const T* v = r.x + c;
    if (r.add) {
      const T* a = r.add + c;
      for (int64_t i = 0; i < len; ++i) buf[i] = r.x[c + i] + a[i];
      v = buf;
    }
    const T cm = chunk_max(v, len, r.scale);
    if (cm > m) {
      if (p.sum != 0.0) p.sum *= std::exp(double(m) - double(cm));
      m = cm;
    }
    if (m == inf) continue;  // the row is invalid; the caller reports it
    if (m == -inf) {         // every z so far is -inf or NaN: only NaN needs noticing
      for (int64_t i = 0; i < len; ++i) p.nan = p.nan || v[i] != v[i];
      continue;
    }
    p.sum += chunk_sum(v, len, r.scale, m);
  }
  p.nan = p.nan || p.sum != p.sum;
  p.max = double(m);
  return p;
}

template <typename T, typename To>
void pass2(const Row<T>& r, int64_t begin, int64_t end, T m, T inv_z, To* out) {
  using VT = Vec<T>;
  using V = typename VT::V;
  constexpr int W = VT::W;
  T* x = r.x;
  const T s = r.scale;
  const T log2e = T(detail::kLog2e);
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    V v = load<V>(x + i);
    if (r.add) {
      v += load<V>(r.add + i);
      std::memcpy(x + i, &v, sizeof(V));
    }
    if (out) store(out + i, VT::template exp2<true>((v * s - m) * log2e) * inv_z);
  }
  for (; i < end; ++i) {
    T v = x[i];
    if (r.add) {
      v += r.add[i];
      x[i] = v;
    }
    if (out) out[i] = To(detail::exp2_neg<true>(T((v * s - m) * log2e)) * inv_z);
  }
}

std::string where(int64_t rows, int64_t row, int64_t col) {
  return rows > 1 ? "[" + std::to_string(row) + ", " + std::to_string(col) + "]"
                  : std::to_string(col);
}

// Position of the first offending z in a row (error path only).
template <typename T>
int64_t find_first(const Row<T>& r, int64_t cols, bool nan) {
  for (int64_t i = 0; i < cols; ++i) {
    const T v = r.scale * (r.x[i] + (r.add ? r.add[i] : T(0)));
    if (nan ? (v != v) : (v == std::numeric_limits<T>::infinity())) return i;
  }
  return -1;
}

template <typename T, typename To>
Status run(const SoftmaxArgs& a) {
  const int64_t nb = softmax_blocks(a.cols);
  const int64_t tasks = a.rows * nb;
  auto row = [&](int64_t b) {
    return Row<T>{static_cast<T*>(a.x) + b * a.x_stride,
                  a.add ? static_cast<const T*>(a.add) + b * a.add_stride : nullptr,
                  T(a.scale[b])};
  };
  std::vector<Partial> part(static_cast<size_t>(tasks));
  // Threads pay off only for large inputs; small ones would mostly wait at the barrier.
  const bool threads = a.rows * a.cols >= kMinParallel;
#pragma omp parallel for schedule(static) if (threads)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / nb, k = t % nb;
    part[t] = pass1(row(b), k * kSoftmaxBlock, std::min(a.cols, (k + 1) * kSoftmaxBlock));
  }

  std::vector<T> row_max(a.rows), row_inv(a.rows);
  for (int64_t b = 0; b < a.rows; ++b) {
    const Partial* p = part.data() + b * nb;
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t k = 0; k < nb; ++k) {
      m = std::max(m, p[k].max);
      nan = nan || p[k].nan;
    }
    const std::string name = a.add ? "scale * (x + add)" : (a.scale[b] == 1.0 ? "x" : "scale * x");
    if (nan)
      return Status::error(name + " must not contain NaN; got NaN at position " +
                           where(a.rows, b, find_first(row(b), a.cols, true)));
    if (m == std::numeric_limits<double>::infinity())
      return Status::error(name + " must not contain +inf (the softmax is undefined); got +inf at "
                           "position " + where(a.rows, b, find_first(row(b), a.cols, false)));
    if (m == -std::numeric_limits<double>::infinity())
      return Status::error(name + " is -inf everywhere" +
                           (a.rows > 1 ? " in row " + std::to_string(b) : std::string()) +
                           "; log-sum-exp is -inf and the softmax is undefined");
    double z = 0.0;
    for (int64_t k = 0; k < nb; ++k)
      if (p[k].sum != 0.0) z += p[k].sum * std::exp(p[k].max - m);
    a.lse[b] = m + std::log(z);
    row_max[b] = T(m);  // m is some z, so exact in T
    row_inv[b] = T(1.0 / z);
  }
  if (!a.out && !a.add) return Status::success();

#pragma omp parallel for schedule(static) if (threads)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / nb, k = t % nb;
    To* out = a.out ? static_cast<To*>(a.out) + b * a.cols : nullptr;
    pass2<T, To>(row(b), k * kSoftmaxBlock, std::min(a.cols, (k + 1) * kSoftmaxBlock), row_max[b],
                 row_inv[b], out);
  }
  return Status::success();
}

}  // namespace

Status softmax(const SoftmaxArgs& a) {
  if (a.x_dtype == DType::f64)
    return a.out_dtype == DType::f32 ? run<double, float>(a) : run<double, double>(a);
  return a.out_dtype == DType::f64 ? run<float, double>(a) : run<float, float>(a);
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
