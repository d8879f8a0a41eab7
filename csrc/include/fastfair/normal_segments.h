// Keyed standard normals for ragged segments: segment i of a flat [N] array holds the normals of
// its own Philox stream, keyed by keys[i], so that a segment's numbers are a pure function of
// (its key, the element index inside it) and depend neither on the other segments of the call,
// nor on the thread count, nor on the device.
//
//   out[offsets[i] + j] = z(keys[i], j),   0 <= j < offsets[i + 1] - offsets[i]
//
// With c = j / 4 and (w0, w1, w2, w3) = Philox4x32-10 at counter (c_lo, c_hi, 0, kTagNormal)
// under key (key_lo, key_hi), Box-Muller on the pairs (w0, w1) and (w2, w3):
//
//   z(4c + 0) = rho(w0) cos theta(w1),   z(4c + 1) = rho(w0) sin theta(w1),
//   z(4c + 2) = rho(w2) cos theta(w3),   z(4c + 3) = rho(w2) sin theta(w3),
//   rho(w) = sqrt(-2 ln u),  u = (w + 1/2) 2^-32 in (0, 1);   theta(w) = 2 pi w 2^-32 in [0, 2 pi)
//
// so |z| <= sqrt(66 ln 2) = 6.76. Every value is computed in double precision by the exact
// sequence of IEEE operations below, each rounded to nearest on its own (no fused multiply-add),
// with correctly rounded division and square root; CPU (every ISA copy), CUDA and the NumPy
// reference (fastfair.reference.normal_segments) therefore produce the same bits. float32 outputs
// are those doubles rounded once. In the formulas, w also stands for the word as an exact double.
//
// ln u (fdlibm's e_log.c, branch-free): u = (w + 0.5) * 2^-32 is exact; frexp(u) = (fr, e) with
// fr in [1/2, 1); if fr < sqrt(1/2) (the double 0x1.6a09e667f3bcdp-1) then m = fr + fr, k = e - 1,
// else m = fr, k = e; f = m - 1;
//   s = f / (2 + f),  z = s * s,  v = z * z,
//   t1 = v * (Lg2 + v * (Lg4 + v * Lg6)),  t2 = z * (Lg1 + v * (Lg3 + v * (Lg5 + v * Lg7))),
//   R = t2 + t1,  h = (0.5 * f) * f,
//   ln u = k * ln2_hi - ((h - (s * (h + R) + k * ln2_lo)) - f).
//
// cos and sin of theta (FreeBSD's k_cos.c / k_sin.c on [-pi/4, pi/4]): t = w * 2^-30 in [0, 4);
// q = t rounded to the nearest integer, ties to even (t + 1.5 * 2^52 - 1.5 * 2^52); r = t - q in
// [-1/2, 1/2]; x = r * (pi / 2) with pi / 2 the double 0x1.921fb54442d18p+0;
//   z = x * x,  v = z * z,
//   S = x + (z * x) * (S1 + z * ((S2 + z * (S3 + z * S4)) + (z * v) * (S5 + z * S6))),
//   P = z * (C1 + z * (C2 + z * C3)) + (v * v) * (C4 + z * (C5 + z * C6)),
//   h = 0.5 * z,  g = 1 - h,  C = g + (((1 - g) - h) + z * P),
//   (cos theta, sin theta) = (C, S), (-S, C), (-C, -S), (S, -C) for q = 0 or 4, 1, 2, 3.
//
// Operations are written left to right as above; a + b + c means (a + b) + c. The constants are the
// hexadecimal doubles of kLn2Hi ... kC6 below.
//
// float32 outputs are computed in single precision (the float32 dtype picks the arithmetic, as
// NumPy's float32 generators do), with the same words and pairing, every float operation rounded
// on its own:
//
// ln u (FreeBSD's e_logf.c, branch-free, on an exact split of u): A = (w >> 16) * 2^-16 and
// B = ((w & 0xffff) + 0.5) * 2^-32 are exact floats with u = A + B; s = A + B, t = B - (s - A)
// (Fast2Sum: s + t = u exactly); frexp(s) = (fr, e); if fr < 0x1.6a09e6p-1 then m = fr + fr,
// k = e - 1, else m = fr, k = e; f = m - 1;
//   r = f / (2 + f),  z = r * r,  v = z * z,  t1 = v * (Lg2 + v * Lg4),  t2 = z * (Lg1 + v * Lg3),
//   R = t2 + t1,  h = (0.5 * f) * f,
//   ln u = (k * ln2_hi - ((h - (r * (h + R) + k * ln2_lo)) - f)) + t / s.
// rho = sqrt(-2 ln u), correctly rounded.
//
// cos and sin of theta (Cephes' sinf / cosf on [-pi/4, pi/4]): q = ((w + 2^29) mod 2^32) >> 30,
// the nearest quarter turn; r = (w - q 2^30) mod 2^32 as a signed 32-bit integer in [-2^29, 2^29];
// x = float(r) * 0x1.921fb6p-30 (pi/2 per 2^30; int to float rounds to nearest);
//   z = x * x,  S = x + (x * z) * (S1 + z * (S2 + z * S3)),
//   C = ((z * z) * (C1 + z * (C2 + z * C3)) - 0.5 * z) + 1,
// and the quadrant as above. z = rho * cos or rho * sin, rounded once.
#pragma once

#include <cstdint>

#include "fastfair/common.h"
#include "fastfair/philox.h"

namespace fastfair {

struct NormalSegmentsArgs {
  DType dtype;             // float32 or float64: out
  int64_t segments;        // m >= 0
  const uint64_t* keys;    // [m] Philox keys (low word, high word)
  const int64_t* offsets;  // [m + 1], offsets[0] = 0, non-decreasing, offsets[m] = N
  int64_t total;           // N
  void* out;               // [N], C-contiguous
};

namespace normal {

// One rounding per operation. CUDA's _rn intrinsics are never contracted into FMAs; host
// translation units that evaluate these templates must compile with -ffp-contract=off
// (csrc/cpu/simd/normal_segments.cpp sets it by pragma). On the host, A and B may be doubles,
// floats or GCC vectors of either; on CUDA the float formulas call the float overloads.
#if defined(__CUDA_ARCH__)
FASTFAIR_HD double add(double a, double b) { return __dadd_rn(a, b); }
FASTFAIR_HD double sub(double a, double b) { return __dsub_rn(a, b); }
FASTFAIR_HD double mul(double a, double b) { return __dmul_rn(a, b); }
FASTFAIR_HD double div(double a, double b) { return __ddiv_rn(a, b); }
FASTFAIR_HD float add(float a, float b) { return __fadd_rn(a, b); }
FASTFAIR_HD float sub(float a, float b) { return __fsub_rn(a, b); }
FASTFAIR_HD float mul(float a, float b) { return __fmul_rn(a, b); }
FASTFAIR_HD float div(float a, float b) { return __fdiv_rn(a, b); }
#else
template <typename A, typename B> FASTFAIR_HD auto add(A a, B b) { return a + b; }
template <typename A, typename B> FASTFAIR_HD auto sub(A a, B b) { return a - b; }
template <typename A, typename B> FASTFAIR_HD auto mul(A a, B b) { return a * b; }
template <typename A, typename B> FASTFAIR_HD auto div(A a, B b) { return a / b; }
#endif

// The bits of a double or a float (or of each lane of a vector of them), and back.
template <typename I, typename V>
FASTFAIR_HD I to_bits(V x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(V) == 8)
    return I(__double_as_longlong(x));
  else
    return I(__float_as_uint(x));
#else
  return __builtin_bit_cast(I, x);
#endif
}
template <typename V, typename I>
FASTFAIR_HD V from_bits(I b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(V) == 8)
    return __longlong_as_double(static_cast<long long>(b));
  else
    return __uint_as_float(static_cast<unsigned>(b));
#else
  return __builtin_bit_cast(V, b);
#endif
}

constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
constexpr double kHalfPi = 0x1.921fb54442d18p+0;
constexpr double kRoundMagic = 0x1.8p+52;  // 1.5 * 2^52: adding it rounds to an integer
constexpr double kLn2Hi = 0x1.62e42feep-1, kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr double kLg1 = 0x1.5555555555593p-1, kLg2 = 0x1.999999997fa04p-2,
                 kLg3 = 0x1.2492494229359p-2, kLg4 = 0x1.c71c51d8e78afp-3,
                 kLg5 = 0x1.7466496cb03dep-3, kLg6 = 0x1.39a09d078c69fp-3,
                 kLg7 = 0x1.2f112df3e5244p-3;
constexpr double kS1 = -0x1.5555555555549p-3, kS2 = 0x1.111111110f8a6p-7,
                 kS3 = -0x1.a01a019c161d5p-13, kS4 = 0x1.71de357b1fe7dp-19,
                 kS5 = -0x1.ae5e68a2b9cebp-26, kS6 = 0x1.5d93a5acfd57cp-33;
constexpr double kC1 = 0x1.555555555554cp-5, kC2 = -0x1.6c16c16c15177p-10,
                 kC3 = 0x1.a01a019cb1590p-16, kC4 = -0x1.27e4f809c52adp-22,
                 kC5 = 0x1.1ee9ebdb4b1c4p-29, kC6 = -0x1.8fae9be8838d4p-37;

// ln((w + 1/2) 2^-32) for a word w given as an exact double (V: double or a vector of doubles, I:
// uint64 of the same lanes).
template <typename V, typename I>
FASTFAIR_HD V log_uniform(V w) {
  const V u = mul(add(w, 0.5), 0x1p-32);
  const I b = to_bits<I>(u);
  // frexp without an integer-to-double conversion: 2^52 + (biased exponent) as a double.
  const V e = sub(from_bits<V>(I((b >> 52) | (uint64_t(0x433) << 52))), 0x1p+52 + 1022.0);
  const V fr = from_bits<V>(I((b & ((uint64_t(1) << 52) - 1)) | (uint64_t(0x3fe) << 52)));
  const auto low = fr < kSqrtHalf;
  const V m = low ? add(fr, fr) : fr;
  const V k = low ? sub(e, 1.0) : e;
  const V f = sub(m, 1.0);
  const V s = div(f, add(2.0, f));
  const V z = mul(s, s), v = mul(z, z);
  const V t1 = mul(v, add(kLg2, mul(v, add(kLg4, mul(v, kLg6)))));
  const V t2 = mul(z, add(kLg1, mul(v, add(kLg3, mul(v, add(kLg5, mul(v, kLg7)))))));
  const V R = add(t2, t1);
  const V h = mul(mul(0.5, f), f);
  return sub(mul(k, kLn2Hi), sub(sub(h, add(mul(s, add(h, R)), mul(k, kLn2Lo))), f));
}

// cos and sin of 2 pi w 2^-32 for a word w given as an exact double.
template <typename V>
FASTFAIR_HD void cos_sin_turn(V w, V& cos_out, V& sin_out) {
  const V t = mul(w, 0x1p-30);
  const V q = sub(add(t, kRoundMagic), kRoundMagic);
  const V x = mul(sub(t, q), kHalfPi);
  const V z = mul(x, x), v = mul(z, z);
  const V r = add(add(kS2, mul(z, add(kS3, mul(z, kS4)))), mul(mul(z, v), add(kS5, mul(z, kS6))));
  const V S = add(x, mul(mul(z, x), add(kS1, mul(z, r))));
  const V P = add(mul(z, add(kC1, mul(z, add(kC2, mul(z, kC3))))),
                  mul(mul(v, v), add(kC4, mul(z, add(kC5, mul(z, kC6))))));
  const V h = mul(0.5, z), g = sub(1.0, h);
  const V C = add(g, add(sub(sub(1.0, g), h), mul(z, P)));
  const auto odd = (q == 1.0) | (q == 3.0);
  const V c = odd ? S : C, s = odd ? C : S;
  cos_out = (q > 0.5) & (q < 2.5) ? -c : c;
  sin_out = (q > 1.5) & (q < 3.5) ? -s : s;
}

}  // namespace normal

// The float32 formulas (see the top of this file). On the host, V is float or a GCC vector of
// floats, W and I the unsigned and signed 32-bit integers of the same lanes.
namespace normal32 {

using normal::add;
using normal::div;
using normal::from_bits;
using normal::mul;
using normal::sub;
using normal::to_bits;

// A signed 32-bit integer (lane) as the nearest float.
template <typename V, typename I>
FASTFAIR_HD V to_float(I x) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(x);
#else
  if constexpr (sizeof(I) == 4) return V(x); else return __builtin_convertvector(x, V);
#endif
}

constexpr float kSqrtHalf = 0x1.6a09e6p-1f;
constexpr float kTurnQuarter = 0x1.921fb6p-30f;  // pi/2 per 2^30
constexpr float kLn2Hi = 0x1.62e3p-1f, kLn2Lo = 0x1.2fefa2p-17f;
constexpr float kLg1 = 0x1.555554p-1f, kLg2 = 0x1.999c26p-2f, kLg3 = 0x1.23d3dcp-2f,
                kLg4 = 0x1.f13c4cp-3f;
constexpr float kS1 = -0x1.555546p-3f, kS2 = 0x1.11073cp-7f, kS3 = -0x1.9943f2p-13f;
constexpr float kC1 = 0x1.55554ap-5f, kC2 = -0x1.6c0c34p-10f, kC3 = 0x1.99eb9cp-16f;

// ln((w + 1/2) 2^-32) for 32-bit words w.
template <typename V, typename W, typename I>
FASTFAIR_HD V log_uniform(W w) {
  const V A = mul(to_float<V>(I(w >> 16)), 0x1p-16f);
  const V B = mul(add(to_float<V>(I(w & 0xffffu)), 0.5f), 0x1p-32f);
  const V s = add(A, B);
  const V t = sub(B, sub(s, A));
  const W b = to_bits<W>(s);
  // frexp without an integer-to-float conversion: 2^23 + (biased exponent) as a float.
  const V e = sub(from_bits<V>(W((b >> 23) | 0x4b000000u)), 0x1p+23f + 126.0f);
  const V fr = from_bits<V>(W((b & 0x7fffffu) | 0x3f000000u));
  const auto low = fr < kSqrtHalf;
  const V m = low ? add(fr, fr) : fr;
  const V k = low ? sub(e, 1.0f) : e;
  const V f = sub(m, 1.0f);
  const V r = div(f, add(2.0f, f));
  const V z = mul(r, r), v = mul(z, z);
  const V t1 = mul(v, add(kLg2, mul(v, kLg4)));
  const V t2 = mul(z, add(kLg1, mul(v, kLg3)));
  const V R = add(t2, t1);
  const V h = mul(mul(0.5f, f), f);
  const V ln_s = sub(mul(k, kLn2Hi), sub(sub(h, add(mul(r, add(h, R)), mul(k, kLn2Lo))), f));
  return add(ln_s, div(t, s));
}

// cos and sin of 2 pi w 2^-32 for 32-bit words w.
template <typename V, typename W, typename I>
FASTFAIR_HD void cos_sin_turn(W w, V& cos_out, V& sin_out) {
  const W q = W(w + 0x20000000u) >> 30;
  const V x = mul(to_float<V>(I(W(w - (q << 30)))), kTurnQuarter);
  const V z = mul(x, x);
  const V S = add(x, mul(mul(x, z), add(kS1, mul(z, add(kS2, mul(z, kS3))))));
  const V C = add(sub(mul(mul(z, z), add(kC1, mul(z, add(kC2, mul(z, kC3))))), mul(0.5f, z)),
                  1.0f);
  const auto odd = (q & 1u) != 0u;
  const V c = odd ? S : C, s = odd ? C : S;
  cos_out = (q == 1u) | (q == 2u) ? -c : c;
  sin_out = (q >= 2u) ? -s : s;
}

}  // namespace normal32

namespace cpu {
Status normal_segments(const NormalSegmentsArgs& args);
}  // namespace cpu

namespace cuda {
// offsets are not inspected on the device (the binding checks them for CPU arrays only); a
// segment that does not lie inside [0, N) is skipped.
Status normal_segments(const NormalSegmentsArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
