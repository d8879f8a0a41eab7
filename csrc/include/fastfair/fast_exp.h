// 2^y for y <= 0 written as plain arithmetic (round to the nearest integer n, a polynomial for
// 2^(y - n), and 2^n built from exponent bits) for CPU kernels: one template serves scalars and
// GCC vector types (vector_size), so each ISA copy of a kernel evaluates 16 floats or 8 doubles
// per instruction, where libm's exp is a scalar call per element. The softmax kernel computes
// exp(|s| (w - top)) as exp2_neg((w - top) * (|s| log2 e)), folding the base change into the
// scale it multiplies by anyway. Arguments are differences taken before scaling: an argument
// s * x - m would not stay <= 0, since compilers fuse it into one FMA that subtracts the rounded
// m = max(s * x) from the exact product.
//
// Accuracy: about 1 ulp (float: Cephes expf polynomial; double: degree-13 Taylor, both on
// |r| <= ln2/2). Results below the smallest normal number (y < -126 for float, -1022 for double)
// are flushed: to exactly 0 when `exact_zero` is set (then 2^-inf = 0), otherwise to a value
// below that smallest normal (1.2e-38 / 2.3e-308), which cannot matter in a sum of terms of
// which the largest is 1. NaN propagates. Arguments must be <= 0.
#pragma once

#include <cstdint>

namespace fastfair::detail {

// The same value in every lane of V (V may be a scalar).
template <typename V, typename S>
inline V splat(S s) {
  return V{} + s;
}

constexpr double kLog2e = 1.4426950408889634;

// V holds floats, I the uint32 lanes of the same width.
template <typename V, typename I, bool exact_zero>
inline V exp2_neg_f32(V y) {
  const V lo = splat<V>(-126.0f);
  const auto under = y < lo;                   // also true for -inf
  y = under ? lo : y;
  constexpr float kMagic = 12582912.0f;        // 1.5 * 2^23: adding it rounds to an integer
  const V t = y + kMagic;
  const V r = (y - (t - kMagic)) * 0.693147180559945f;  // |r| <= ln2 / 2
  V p = splat<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // The low bits of t hold n + 2^22; shifting by 23 drops the 2^22 and leaves n in the exponent.
  const I scale_bits = (__builtin_bit_cast(I, t) << 23) + (127u << 23);
  const V e = p * __builtin_bit_cast(V, scale_bits);
  if constexpr (exact_zero) return under ? splat<V>(0.0f) : e;
  return e;
}

// V holds doubles, I the uint64 lanes of the same width.
template <typename V, typename I, bool exact_zero>
inline V exp2_neg_f64(V y) {
  const V lo = splat<V>(-1022.0);
  const auto under = y < lo;
  y = under ? lo : y;
  constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
  const V t = y + kMagic;
  const V r = (y - (t - kMagic)) * 0.6931471805599453;
  V p = splat<V>(1.0 / 6227020800.0);          // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r * r + r + 1.0;
  const I scale_bits = (__builtin_bit_cast(I, t) << 52) + (uint64_t(1023) << 52);
  const V e = p * __builtin_bit_cast(V, scale_bits);
  if constexpr (exact_zero) return under ? splat<V>(0.0) : e;
  return e;
}

template <bool exact_zero>
inline float exp2_neg(float y) { return exp2_neg_f32<float, uint32_t, exact_zero>(y); }
template <bool exact_zero>
inline double exp2_neg(double y) { return exp2_neg_f64<double, uint64_t, exact_zero>(y); }

}  // namespace fastfair::detail
