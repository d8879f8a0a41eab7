// Compiled once per ISA level (see fastfair/cpu_isa.h). The normal variates are the expensive
// part: Philox4x32-10 runs on W counters at once (32x32 -> 64-bit products from mul_epu32 on the
// even and odd lanes), and Box-Muller uses polynomial log / sin / cos on GCC vector types, so
// one ISA copy draws 16 (AVX-512), 8 (AVX2) or 4 (SSE2) pairs per instruction stream. The update
// itself is one streaming loop over x, grad and out.
#include "fastfair/sgld.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "fastfair/fast_exp.h"
#include "fastfair/simd_width.h"
#include "fastfair/x86_intrinsics.h"

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

constexpr int W = kVecBytes / 4;  // float lanes: 16, 8 or 4, a divisor of kGaussCounters
typedef float VF __attribute__((vector_size(kVecBytes)));
typedef int32_t VI __attribute__((vector_size(kVecBytes)));
typedef uint32_t VU __attribute__((vector_size(kVecBytes)));
typedef uint64_t VU64 __attribute__((vector_size(kVecBytes)));

using detail::splat;

constexpr int64_t kTile = 4096;  // elements per parallel work item; its normals stay in L1

// Full 64-bit products of the low 32 bits of each 64-bit lane.
[[gnu::always_inline]] inline VU64 mul_even(VU64 a, VU64 m) {
#if defined(__AVX512F__)
  return (VU64)_mm512_mul_epu32((__m512i)a, (__m512i)m);
#elif defined(__AVX2__)
  return (VU64)_mm256_mul_epu32((__m256i)a, (__m256i)m);
#elif defined(__SSE2__)
  return (VU64)_mm_mul_epu32((__m128i)a, (__m128i)m);
#else
  const VU64 mask = splat<VU64>(uint64_t(0xffffffffu));
  return (a & mask) * (m & mask);
#endif
}

// (hi, lo) of a * m for every 32-bit lane: even lanes from one product, odd lanes (shifted down)
// from a second one, then interleaved back.
[[gnu::always_inline]] inline void mulhilo(VU a, uint32_t m, VU& hi, VU& lo) {
  const VU64 mv = splat<VU64>(uint64_t(m));
  const VU64 a64 = (VU64)a;
  const VU64 even = mul_even(a64, mv);
  const VU64 odd = mul_even(a64 >> 32, mv);
  const VU64 low_mask = splat<VU64>(uint64_t(0xffffffffu));
  lo = (VU)((even & low_mask) | (odd << 32));
  hi = (VU)((even >> 32) | (odd & ~low_mask));
}

// philox::philox4x32_10 on W counters (structure of arrays).
[[gnu::always_inline]] inline void philox_vec(VU c[4], uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    VU hi0, lo0, hi1, lo1;
    mulhilo(c[0], 0xD2511F53u, hi0, lo0);
    mulhilo(c[2], 0xCD9E8D57u, hi1, lo1);
    const VU n0 = hi1 ^ c[1] ^ k0;
    const VU n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

[[gnu::always_inline]] inline VF bits24(VU w) { return __builtin_convertvector((VI)(w >> 8), VF); }

[[gnu::always_inline]] inline VF vsqrt(VF x) {
#if defined(__AVX512F__)
  return (VF)_mm512_sqrt_ps((__m512)x);
#elif defined(__AVX2__)
  return (VF)_mm256_sqrt_ps((__m256)x);
#elif defined(__SSE2__)
  return (VF)_mm_sqrt_ps((__m128)x);
#else
  for (int l = 0; l < W; ++l) x[l] = std::sqrt(x[l]);
  return x;
#endif
}

// Natural log for x in (0, 1] (Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), a degree-9
// polynomial in m - 1; about 1 ulp).
[[gnu::always_inline]] inline VF vlog(VF x) {
  const VI xi = (VI)x;
  VI e = ((xi >> 23) & 0xff) - 126;
  VF m = (VF)((xi & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const VI small = m < 0.707106781186547524f;   // -1 where true
  e += small;
  m = m - 1.0f + (VF)((VI)m & small);
  const VF z = m * m;
  VF y = splat<VF>(7.0376836292e-2f);
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const VF fe = __builtin_convertvector(e, VF);
  y += fe * -2.12194440e-4f;
  y -= 0.5f * z;
  return m + y + fe * 0.693359375f;
}

// sin and cos of 2 pi u for u in [0, 1): 4u = q + r with q an integer and |r| <= 1/2 (exact),
// Cephes polynomials on a = r pi / 2 in [-pi/4, pi/4], then the quadrant q mod 4.
[[gnu::always_inline]] inline void vsincos_2pi(VF u, VF& s_out, VF& c_out) {
  const VF v = u * 4.0f;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const VF q = (v + kMagic) - kMagic;
  const VF a = (v - q) * 1.57079632679489662f;
  const VI qi = __builtin_convertvector(q, VI) & 3;
  const VF a2 = a * a;
  VF ps = splat<VF>(-1.9515295891e-4f);
  ps = ps * a2 + 8.3321608736e-3f;
  ps = ps * a2 - 1.6666654611e-1f;
  const VF s = a + a * a2 * ps;
  VF pc = splat<VF>(2.443315711809948e-5f);
  pc = pc * a2 - 1.388731625493765e-3f;
  pc = pc * a2 + 4.166664568298827e-2f;
  const VF c = 1.0f - 0.5f * a2 + a2 * a2 * pc;
  const VI swap = (qi & 1) != 0;
  VF sn = swap ? c : s;
  VF cs = swap ? s : c;
  sn = ((qi & 2) != 0) ? -sn : sn;
  cs = (((qi + 1) & 2) != 0) ? -cs : cs;
  s_out = sn;
  c_out = cs;
}

template <typename V>
[[gnu::always_inline]] inline void store(float* p, V v) { std::memcpy(p, &v, sizeof(V)); }

// The 64 normals of block b (float32 path).
void block_f32(uint64_t seed, uint64_t b, float* out) {
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  VU lane;
  for (int l = 0; l < W; ++l) lane[l] = uint32_t(l);
  const uint32_t base = uint32_t(b * kGaussCounters);  // low word; its low 4 bits are zero
  const uint32_t high = uint32_t((b * kGaussCounters) >> 32);
  for (int q = 0; q < kGaussCounters / W; ++q) {
    VU c[4] = {splat<VU>(base + uint32_t(q * W)) + lane, splat<VU>(high), splat<VU>(0u),
               splat<VU>(philox::kTagGaussian)};
    philox_vec(c, k0, k1);
    const VF r01 = vsqrt(-2.0f * vlog(bits24(c[0]) * 5.9604644775390625e-8f + 2.98023223876953125e-8f));
    const VF r23 = vsqrt(-2.0f * vlog(bits24(c[2]) * 5.9604644775390625e-8f + 2.98023223876953125e-8f));
    VF s1, c1, s3, c3;
    vsincos_2pi(bits24(c[1]) * 5.9604644775390625e-8f, s1, c1);
    vsincos_2pi(bits24(c[3]) * 5.9604644775390625e-8f, s3, c3);
    store(out + q * W, r01 * c1);
    store(out + 16 + q * W, r01 * s1);
    store(out + 32 + q * W, r23 * c3);
    store(out + 48 + q * W, r23 * s3);
  }
}

// The 64 normals of block b (float64 path: the same words, double-precision Box-Muller).
void block_f64(uint64_t seed, uint64_t b, double* out) {
  constexpr double kTwoPi = 6.283185307179586;
  for (int l = 0; l < kGaussCounters; ++l) {
    const philox::U32x4 w =
        philox::draw(seed, 0, philox::kTagGaussian, b * kGaussCounters + uint64_t(l));
    const double r01 = std::sqrt(-2.0 * std::log(double(w.v[0] >> 8) * 0x1p-24 + 0x1p-25));
    const double r23 = std::sqrt(-2.0 * std::log(double(w.v[2] >> 8) * 0x1p-24 + 0x1p-25));
    const double a1 = kTwoPi * (double(w.v[1] >> 8) * 0x1p-24);
    const double a3 = kTwoPi * (double(w.v[3] >> 8) * 0x1p-24);
    out[l] = r01 * std::cos(a1);
    out[16 + l] = r01 * std::sin(a1);
    out[32 + l] = r23 * std::cos(a3);
    out[48 + l] = r23 * std::sin(a3);
  }
}

inline void block(uint64_t seed, uint64_t b, float* out) { block_f32(seed, b, out); }
inline void block(uint64_t seed, uint64_t b, double* out) { block_f64(seed, b, out); }

// n normals of the stream starting at g0: whole blocks are written in place, partial ones at the
// edges go through a scratch block.
template <typename T>
void gaussian(uint64_t seed, uint64_t g0, int64_t n, T* out) {
  alignas(64) T tmp[kGaussBlock];
  uint64_t g = g0;
  int64_t done = 0;
  while (done < n) {
    const uint64_t b = g / kGaussBlock;
    const int64_t j = int64_t(g % kGaussBlock);
    const int64_t take = std::min<int64_t>(kGaussBlock - j, n - done);
    if (take == kGaussBlock) {
      block(seed, b, out + done);
    } else {
      block(seed, b, tmp);
      std::memcpy(out + done, tmp + j, size_t(take) * sizeof(T));
    }
    done += take;
    g += uint64_t(take);
  }
}

template <typename T>
struct Update {
  T step, noise, clip, lo, hi;
};

template <typename T>
Update<T> row_update(const LangevinArgs& u, int64_t row) {
  return {T(u.step_vec ? u.step_vec[row] : u.step), T(u.noise_vec ? u.noise_vec[row] : u.noise),
          T(u.grad_clip), T(u.lo), T(u.hi)};
}

// out = clamp(x - step * clip(grad) + noise * z) over one run of a row (z == nullptr: no noise).
// out may alias x: every iteration reads its element before writing it.
template <typename T>
void apply(const T* x, const T* grad, const T* z, T* out, int64_t len, const Update<T>& p) {
  if (z) {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      T g = grad[i];
      g = g < -p.clip ? -p.clip : g;
      g = g > p.clip ? p.clip : g;
      T v = x[i] - p.step * g + p.noise * z[i];
      v = v < p.lo ? p.lo : v;
      out[i] = v > p.hi ? p.hi : v;
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      T g = grad[i];
      g = g < -p.clip ? -p.clip : g;
      g = g > p.clip ? p.clip : g;
      T v = x[i] - p.step * g;
      v = v < p.lo ? p.lo : v;
      out[i] = v > p.hi ? p.hi : v;
    }
  }
}

bool has_noise(const LangevinArgs& u) { return u.noise_vec != nullptr || u.noise != 0.0; }

template <typename T>
Status sgld_run(const SgldArgs& a) {
  const int64_t total = a.rows * a.cols;
  const int64_t tiles = (total + kTile - 1) / kTile;
  const T* x = static_cast<const T*>(a.x);
  const T* grad = static_cast<const T*>(a.grad);
  T* out = static_cast<T*>(a.out);
  const bool noisy = has_noise(a.u);
#pragma omp parallel for schedule(static) if (total >= 4 * kTile)
  for (int64_t t = 0; t < tiles; ++t) {
    alignas(64) T z[kTile];
    const int64_t begin = t * kTile, end = std::min(total, begin + kTile);
    if (noisy) gaussian(a.u.seed, a.u.offset + uint64_t(begin), end - begin, z);
    for (int64_t i = begin; i < end;) {
      const int64_t row = i / a.cols;
      const int64_t stop = std::min(end, (row + 1) * a.cols);
      apply(x + i, grad + i, noisy ? z + (i - begin) : nullptr, out + i, stop - i,
            row_update<T>(a.u, row));
      i = stop;
    }
  }
  return Status::success();
}

template <typename T>
Status fedevg_run(const FedEvgServerArgs& a) {
  const int64_t m = a.clients, M = a.rows, D = a.cols;
  // Validate everything before the first write, so a failing call leaves out untouched.
  double wsum = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    const double w = a.weight[i];
    if (!(w >= 0.0) || !std::isfinite(w))
      return Status::error("w must be finite and >= 0; got " + std::to_string(w) + " at position " +
                           std::to_string(i));
    wsum += w;
  }
  if (!(wsum > 0.0)) return Status::error("w must have a positive sum; got all zeros");
  for (int64_t k = 0; k < m * M; ++k) {
    const double e = a.energy[k];
    if (!(e > 0.0) || !std::isfinite(e))
      return Status::error("e must be finite and > 0; got " + std::to_string(e) + " at [" +
                           std::to_string(k / M) + ", " + std::to_string(k % M) + "]");
  }
  const int64_t per_row = (D + kTile - 1) / kTile;
  const T* x = static_cast<const T*>(a.x);
  const T* G = static_cast<const T*>(a.G);
  T* out = static_cast<T*>(a.out);
  const bool noisy = has_noise(a.u);
#pragma omp parallel for schedule(static) if (M * D >= 4 * kTile)
  for (int64_t t = 0; t < M * per_row; ++t) {
    alignas(64) T z[kTile];
    alignas(64) T acc[kTile];
    std::vector<T> coef(static_cast<size_t>(m));
    const int64_t j = t / per_row;
    const int64_t d0 = (t % per_row) * kTile, len = std::min(D, d0 + kTile) - d0;
    double den = 0.0;
    for (int64_t i = 0; i < m; ++i) den += a.weight[i] * a.energy[i * M + j];
    for (int64_t i = 0; i < m; ++i) coef[i] = T(a.weight[i] * a.energy[i * M + j] / den);
    std::fill(acc, acc + len, T(0));
    for (int64_t i = 0; i < m; ++i) {
      const T c = coef[i];
      if (c == T(0)) continue;
      const T* g = G + (i * M + j) * D + d0;
#pragma omp simd
      for (int64_t d = 0; d < len; ++d) acc[d] += c * g[d];
    }
    const int64_t flat = j * D + d0;
    if (noisy) gaussian(a.u.seed, a.u.offset + uint64_t(flat), len, z);
    apply(x + flat, acc, noisy ? z : nullptr, out + flat, len, row_update<T>(a.u, j));
  }
  return Status::success();
}

}  // namespace

Status sgld_step(const SgldArgs& a) {
  return a.dtype == DType::f64 ? sgld_run<double>(a) : sgld_run<float>(a);
}

Status fedevg_server_step(const FedEvgServerArgs& a) {
  return a.dtype == DType::f64 ? fedevg_run<double>(a) : fedevg_run<float>(a);
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
