// Compiled once per ISA level (see fastfair/cpu_isa.h). The work is a flat list of "slots": segment
// i owns slots [C_i, C_i + ceil(len_i / 4)) with C_i = offsets[i] / 4 + i (strictly increasing, so
// the ranges are disjoint; the total is N / 4 + m), one Philox counter per slot. Threads take equal
// tiles of slots, whatever the segment lengths (a segment of 10^6 elements is split across
// threads, a million empty segments cost one slot each), and a tile finds its first segment by a
// binary search of C. Counters go through a vector pass: Philox on up to kChunk counters (eight
// to a register with AVX-512, else an auto-vectorised loop), then ln / cos / sin of
// normal_segments.h on GCC vectors of 8 (AVX-512), 4 (AVX2) or 2 (SSE2) doubles, or for float32
// output the header's float formulas on vectors of 16, 8 or 4 floats. Every lane evaluates the
// same operations, so the bits depend neither on the ISA nor on the thread count nor on the split
// into calls.
//
// The header's formulas must round every product and sum on its own: no contraction into FMA.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "fastfair/normal_segments.h"

#include <algorithm>
#include <cstring>

#include "fastfair/simd_width.h"
#include "fastfair/x86_intrinsics.h"

namespace fastfair::cpu::FASTFAIR_ISA {
namespace {

constexpr int L = kVecBytes / 8;  // double lanes
typedef double VD __attribute__((vector_size(kVecBytes)));
typedef uint64_t VU64 __attribute__((vector_size(kVecBytes)));
typedef uint32_t VU32 __attribute__((vector_size(kVecBytes / 2)));
constexpr int LF = kVecBytes / 4;  // float lanes
typedef float VF __attribute__((vector_size(kVecBytes)));
typedef uint32_t VW __attribute__((vector_size(kVecBytes)));
typedef int32_t VI __attribute__((vector_size(kVecBytes)));

// Counters per vector pass (their words and normals stay in L1); a multiple of 16.
constexpr int64_t kChunk = 64;
constexpr int64_t kTile = 1024;  // slots per parallel work item

// Correctly rounded square root of every lane (the instruction, not libm: no errno branch).
[[gnu::always_inline]] inline VD vsqrt(VD x) {
#if defined(__AVX512F__)
  return (VD)_mm512_sqrt_pd((__m512d)x);
#elif defined(__AVX__)
  return (VD)_mm256_sqrt_pd((__m256d)x);
#elif defined(__SSE2__)
  return (VD)_mm_sqrt_pd((__m128d)x);
#else
  for (int l = 0; l < L; ++l) x[l] = __builtin_sqrt(x[l]);
  return x;
#endif
}

[[gnu::always_inline]] inline VF vsqrt(VF x) {
#if defined(__AVX512F__)
  return (VF)_mm512_sqrt_ps((__m512)x);
#elif defined(__AVX__)
  return (VF)_mm256_sqrt_ps((__m256)x);
#elif defined(__SSE2__)
  return (VF)_mm_sqrt_ps((__m128)x);
#else
  for (int l = 0; l < LF; ++l) x[l] = __builtin_sqrtf(x[l]);
  return x;
#endif
}

// z[k][l] to out[4 l + k] for l < n.
template <typename T>
void interleave(const T (*z)[kChunk], int64_t n, T* out) {
#pragma omp simd
  for (int64_t l = 0; l < n; ++l) {
    out[4 * l + 0] = z[0][l];
    out[4 * l + 1] = z[1][l];
    out[4 * l + 2] = z[2][l];
    out[4 * l + 3] = z[3][l];
  }
}

[[gnu::always_inline]] inline VD load_word(const uint32_t* p) {
  VU32 w;
  std::memcpy(&w, p, sizeof(w));
  return __builtin_convertvector(w, VD);
}

// Philox words of counters c0 .. c0 + n - 1 (n a multiple of 8, at most kChunk) into w[k][l].
void philox_words(uint64_t key, uint64_t c0, int64_t n, uint32_t (*w)[kChunk]) {
#if defined(__AVX512F__)
  // Eight counters a register, one in each 64-bit lane: vpmuludq reads the low 32 bits of a
  // lane, so the high halves left over from a round never enter a product, and the words are the
  // low halves at the end.
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
  const __m512i lane = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t l = 0; l < n; l += 8) {
    const __m512i c = _mm512_add_epi64(_mm512_set1_epi64(int64_t(c0 + uint64_t(l))), lane);
    __m512i v0 = c, v1 = _mm512_srli_epi64(c, 32), v2 = _mm512_setzero_si512();
    __m512i v3 = _mm512_set1_epi64(philox::kTagNormal);
    uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    for (int r = 0; r < 10; ++r) {
      const __m512i p0 = _mm512_mul_epu32(m0, v0), p1 = _mm512_mul_epu32(m1, v2);
      // 0x96: a ^ b ^ c
      v0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), v1, _mm512_set1_epi64(k0),
                                     0x96);
      v2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), v3, _mm512_set1_epi64(k1),
                                     0x96);
      v1 = p1;
      v3 = p0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[0] + l), _mm512_cvtepi64_epi32(v0));
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[1] + l), _mm512_cvtepi64_epi32(v1));
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[2] + l), _mm512_cvtepi64_epi32(v2));
    _mm256_store_si256(reinterpret_cast<__m256i*>(w[3] + l), _mm512_cvtepi64_epi32(v3));
  }
#else
#pragma omp simd
  for (int64_t l = 0; l < n; ++l) {
    const philox::U32x4 r = philox::draw(key, 0, philox::kTagNormal, c0 + uint64_t(l));
    w[0][l] = r.v[0];
    w[1][l] = r.v[1];
    w[2][l] = r.v[2];
    w[3][l] = r.v[3];
  }
#endif
}

// The 4 n normals of counters c0 .. c0 + n - 1 (n <= kChunk) of `key`, into out[0 .. 4 n): the
// double formulas.
void whole_counters(uint64_t key, uint64_t c0, int64_t n, double* out) {
  alignas(64) uint32_t w[4][kChunk];
  alignas(64) double z[4][kChunk];
  const int64_t padded = (n + 7) / 8 * 8;  // the last vector's extra lanes are not stored
  philox_words(key, c0, padded, w);
  for (int64_t l = 0; l < padded; l += L) {
    const VD r0 = vsqrt(normal::mul(-2.0, normal::log_uniform<VD, VU64>(load_word(w[0] + l))));
    const VD r2 = vsqrt(normal::mul(-2.0, normal::log_uniform<VD, VU64>(load_word(w[2] + l))));
    VD c1, s1, c3, s3;
    normal::cos_sin_turn(load_word(w[1] + l), c1, s1);
    normal::cos_sin_turn(load_word(w[3] + l), c3, s3);
    const VD z0 = normal::mul(r0, c1), z1 = normal::mul(r0, s1);
    const VD z2 = normal::mul(r2, c3), z3 = normal::mul(r2, s3);
    std::memcpy(z[0] + l, &z0, sizeof(VD));
    std::memcpy(z[1] + l, &z1, sizeof(VD));
    std::memcpy(z[2] + l, &z2, sizeof(VD));
    std::memcpy(z[3] + l, &z3, sizeof(VD));
  }
  interleave(z, n, out);
}

// The same counters through the float formulas.
void whole_counters(uint64_t key, uint64_t c0, int64_t n, float* out) {
  alignas(64) uint32_t w[4][kChunk];
  alignas(64) float z[4][kChunk];
  const int64_t padded = (n + LF - 1) / LF * LF;
  philox_words(key, c0, (padded + 7) / 8 * 8, w);
  for (int64_t l = 0; l < padded; l += LF) {
    VW w0, w1, w2, w3;
    std::memcpy(&w0, w[0] + l, sizeof(VW));
    std::memcpy(&w1, w[1] + l, sizeof(VW));
    std::memcpy(&w2, w[2] + l, sizeof(VW));
    std::memcpy(&w3, w[3] + l, sizeof(VW));
    const VF r0 = vsqrt(normal32::mul(-2.0f, normal32::log_uniform<VF, VW, VI>(w0)));
    const VF r2 = vsqrt(normal32::mul(-2.0f, normal32::log_uniform<VF, VW, VI>(w2)));
    VF c1, s1, c3, s3;
    normal32::cos_sin_turn<VF, VW, VI>(w1, c1, s1);
    normal32::cos_sin_turn<VF, VW, VI>(w3, c3, s3);
    const VF z0 = normal32::mul(r0, c1), z1 = normal32::mul(r0, s1);
    const VF z2 = normal32::mul(r2, c3), z3 = normal32::mul(r2, s3);
    std::memcpy(z[0] + l, &z0, sizeof(VF));
    std::memcpy(z[1] + l, &z1, sizeof(VF));
    std::memcpy(z[2] + l, &z2, sizeof(VF));
    std::memcpy(z[3] + l, &z3, sizeof(VF));
  }
  interleave(z, n, out);
}

// Counters [c0, c1) of a segment of `len` elements starting at `seg`: the whole ones in place, the
// one cut by the segment's end (if any) through a scratch.
template <typename T>
void segment_part(uint64_t key, int64_t c0, int64_t c1, int64_t len, T* seg) {
  const int64_t whole = std::min(c1, len / 4);
  for (int64_t c = c0; c < whole; c += kChunk)
    whole_counters(key, uint64_t(c), std::min(kChunk, whole - c), seg + 4 * c);
  if (whole < c1) {
    T z[4];
    whole_counters(key, uint64_t(whole), 1, z);
    std::memcpy(seg + 4 * whole, z, size_t(len - 4 * whole) * sizeof(T));
  }
}

template <typename T>
Status run(const NormalSegmentsArgs& a) {
  const int64_t m = a.segments;
  const int64_t* off = a.offsets;
  T* out = static_cast<T*>(a.out);
  auto slot = [off](int64_t i) { return off[i] / 4 + i; };  // C_i
  const int64_t slots = slot(m);
  const int64_t tiles = (slots + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (slots >= 4 * kTile)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t t0 = t * kTile, t1 = std::min(slots, t0 + kTile);
    // The last segment whose slots start at or before t0.
    int64_t lo = 0, hi = m - 1;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (slot(mid) <= t0) lo = mid; else hi = mid - 1;
    }
    for (int64_t i = lo; i < m && slot(i) < t1; ++i) {
      const int64_t len = off[i + 1] - off[i];
      const int64_t c0 = std::max<int64_t>(t0 - slot(i), 0);
      const int64_t c1 = std::min((len + 3) / 4, t1 - slot(i));
      if (c0 < c1) segment_part(a.keys[i], c0, c1, len, out + off[i]);
    }
  }
  return Status::success();
}

}  // namespace

Status normal_segments(const NormalSegmentsArgs& a) {
  return a.dtype == DType::f64 ? run<double>(a) : run<float>(a);
}

}  // namespace fastfair::cpu::FASTFAIR_ISA
