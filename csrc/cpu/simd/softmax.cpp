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

// The row's z = s * v is never formed: with w = sign(s) * v (exact) and top = max w, every
// exponent is |s| (w - top) <= 0, evaluated as (w - top) * c with c = |s| log2 e. Shifting by the
// rounded max of s * v instead would not do: compilers fuse s * v - m into one FMA, which then
// subtracts the rounded max from the exact product, leaving an exponent of up to half an ulp of
// |z| (1e8 for float32 |z| ~ 1e15) at the maximum itself. lse = |s| top + log(sum) in float64.
struct Partial {
  double top;  // max of w over the block; -inf when every z of the block is -inf
  double sum;  // sum exp(|s| (w - top))
  bool nan;
};

template <typename T>
struct Row {
  T* x;
  const T* add;
  double scale;  // s
  T sign;        // sign(s); 0 for s = 0, where w = 0 * v is 0 or NaN like z
  T c;           // |s| log2 e, capped at the largest finite T
};

template <typename T>
Row<T> make_row(T* x, const T* add, double s) {
  const double c = std::min(std::fabs(s) * detail::kLog2e, double(std::numeric_limits<T>::max()));
  return Row<T>{x, add, s, s > 0.0 ? T(1) : s < 0.0 ? T(-1) : T(0), T(c)};
}

// Max of w = sign * v over a chunk of v. NaN entries are skipped here; they surface as a NaN sum.
// Four accumulators hide the latency of the max.
template <typename T>
T chunk_max(const T* v, int64_t len, T sign) {
  using V = typename Vec<T>::V;
  constexpr int W = Vec<T>::W;
  const T inf = std::numeric_limits<T>::infinity();
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
  return hi;
}

// sum exp(|s| (w - top)) = sum 2^((sign * v - top) * c) over a chunk, accumulated in float64: four
// vectors of exponentials are added in the input precision (three roundings of terms <= 1)
// before each widening add.
template <typename T>
double chunk_sum(const T* v, int64_t len, T sign, T top, T c) {
  using VT = Vec<T>;
  using V = typename VT::V;
  constexpr int W = VT::W;
  VD acc[2] = {};
  int64_t j = 0;
  for (; j + 4 * W <= len; j += 4 * W) {
    V e[4];
    for (int u = 0; u < 4; ++u)
      e[u] = VT::template exp2<false>((load<V>(v + j + u * W) * sign - top) * c);
    VT::widen_add((e[0] + e[1]) + (e[2] + e[3]), acc);
  }
  for (; j + W <= len; j += W)
    VT::widen_add(VT::template exp2<false>((load<V>(v + j) * sign - top) * c), acc);
  double tail = 0.0;
  for (; j < len; ++j) tail += double(detail::exp2_neg<false>(T((v[j] * sign - top) * c)));
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
  const double abs_s = std::fabs(r.scale);
  T m = -inf;
  for (int64_t c = begin; c < end; c += kChunk) {
    const int64_t len = std::min(kChunk, end - c);
    const T* v = r.x + c;
    if (r.add) {
      const T* a = r.add + c;
      for (int64_t i = 0; i < len; ++i) buf[i] = r.x[c + i] + a[i];
      v = buf;
    }
    const T cm = chunk_max(v, len, r.sign);
    if (cm > m) {
      if (p.sum != 0.0) p.sum *= std::exp(abs_s * (double(m) - double(cm)));
      m = cm;
    }
    if (m == inf) continue;  // the row is invalid; the caller reports it
    if (m == -inf) {         // every z so far is -inf or NaN: only NaN needs noticing
      for (int64_t i = 0; i < len; ++i) p.nan = p.nan || v[i] * r.sign != v[i] * r.sign;
      continue;
    }
    p.sum += chunk_sum(v, len, r.sign, m, r.c);
  }
  p.nan = p.nan || p.sum != p.sum;
  p.top = double(m);
  return p;
}

template <typename T, typename To>
void pass2(const Row<T>& r, int64_t begin, int64_t end, T top, T inv_z, To* out) {
  using VT = Vec<T>;
  using V = typename VT::V;
  constexpr int W = VT::W;
  T* x = r.x;
  const T sign = r.sign, c = r.c;
  int64_t i = begin;
  for (; i + W <= end; i += W) {
    V v = load<V>(x + i);
    if (r.add) {
      v += load<V>(r.add + i);
      std::memcpy(x + i, &v, sizeof(V));
    }
    if (out) store(out + i, VT::template exp2<true>((v * sign - top) * c) * inv_z);
  }
  for (; i < end; ++i) {
    T v = x[i];
    if (r.add) {
      v += r.add[i];
      x[i] = v;
    }
    if (out) out[i] = To(detail::exp2_neg<true>(T((v * sign - top) * c)) * inv_z);
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
    const double z = r.scale * double(r.x[i] + (r.add ? r.add[i] : T(0)));
    if (nan ? (z != z) : (z == std::numeric_limits<double>::infinity())) return i;
  }
  return -1;
}

template <typename T, typename To>
Status run(const SoftmaxArgs& a) {
  const int64_t nb = softmax_blocks(a.cols);
  const int64_t tasks = a.rows * nb;
  auto row = [&](int64_t b) {
    return make_row<T>(static_cast<T*>(a.x) + b * a.x_stride,
                       a.add ? static_cast<const T*>(a.add) + b * a.add_stride : nullptr,
                       a.scale[b]);
  };
  std::vector<Partial> part(static_cast<size_t>(tasks));
  // Threads pay off only for large inputs; small ones would mostly wait at the barrier.
  const bool threads = a.rows * a.cols >= kMinParallel;
#pragma omp parallel for schedule(static) if (threads)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / nb, k = t % nb;
    part[t] = pass1(row(b), k * kSoftmaxBlock, std::min(a.cols, (k + 1) * kSoftmaxBlock));
  }

  std::vector<T> row_top(a.rows), row_inv(a.rows);
  for (int64_t b = 0; b < a.rows; ++b) {
    const Partial* p = part.data() + b * nb;
    const double abs_s = std::fabs(a.scale[b]);
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t k = 0; k < nb; ++k) {
      m = std::max(m, p[k].top);
      nan = nan || p[k].nan;
    }
    const std::string name = a.z_name ? a.z_name : "scale * x";
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
      if (p[k].sum != 0.0) z += p[k].sum * std::exp(abs_s * (p[k].top - m));
    a.lse[b] = abs_s * m + std::log(z);
    row_top[b] = T(m);  // m is some w, so exact in T
    row_inv[b] = T(1.0 / z);
  }
  if (!a.out && !a.add) return Status::success();

#pragma omp parallel for schedule(static) if (threads)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / nb, k = t % nb;
    To* out = a.out ? static_cast<To*>(a.out) + b * a.cols : nullptr;
    pass2<T, To>(row(b), k * kSoftmaxBlock, std::min(a.cols, (k + 1) * kSoftmaxBlock), row_top[b],
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
