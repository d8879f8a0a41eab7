// Framework-free types shared by every fastfair kernel: storage dtypes, half/bfloat16
// conversion, and the status a kernel returns instead of throwing across the C ABI.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#if defined(__CUDACC__)
#define FASTFAIR_HD __host__ __device__ __forceinline__
#else
#define FASTFAIR_HD inline
#endif

namespace fastfair {

enum class DType : int { f32 = 0, f64 = 1, f16 = 2, bf16 = 3 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
  }
  return "unknown";
}

inline int dtype_size(DType t) { return (t == DType::f64) ? 8 : (t == DType::f32 ? 4 : 2); }

// Kernels report failures as a Status so that the C++ core never depends on Python.
struct Status {
  bool ok = true;
  std::string message;
  static Status success() { return {}; }
  static Status error(std::string msg) { return {false, std::move(msg)}; }
};

// 16-bit storage types. Plain structs (not CUDA's __half) so that CPU and CUDA code share
// one bit-exact conversion with round-to-nearest-even.
struct half_t { uint16_t bits; };
struct bfloat16_t { uint16_t bits; };

FASTFAIR_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f; std::memcpy(&f, &u, 4); return f;
#endif
}
FASTFAIR_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u; std::memcpy(&u, &f, 4); return u;
#endif
}

FASTFAIR_HD float to_float(bfloat16_t v) { return bits_to_float(uint32_t(v.bits) << 16); }

FASTFAIR_HD bfloat16_t to_bfloat16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return {uint16_t(u >> 16)};
}

FASTFAIR_HD float to_float(half_t v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
  // Subnormal half: value = man * 2^-24, exact in float.
  const float mag = float(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

FASTFAIR_HD half_t to_half(float f) {
  const uint32_t u = float_to_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return {uint16_t(sign | 0x7e00u)};           // NaN
  if (abs >= 0x477ff000u) return {uint16_t(sign | 0x7c00u)};          // rounds to inf
  if (abs < 0x38800000u) {                                            // subnormal or zero
    // Adding 0.5 (2^-1) aligns the half subnormal grid (2^-24) with float's last mantissa bit,
    // so the float adder performs the round-to-nearest-even for us.
    const float shifted = bits_to_float(abs) + 0.5f;
    return {uint16_t(sign | (float_to_bits(shifted) - 0x3f000000u))};
  }
  uint32_t r = abs + 0xc8000fffu + ((abs >> 13) & 1u);  // rebias exponent (-112 << 23) and round
  return {uint16_t(sign | (r >> 13))};
}

template <typename T> struct Storage;
template <> struct Storage<float> {
  using acc = float;
  FASTFAIR_HD static float load(float v) { return v; }
  FASTFAIR_HD static float store(float v) { return v; }
};
template <> struct Storage<double> {
  using acc = double;
  FASTFAIR_HD static double load(double v) { return v; }
  FASTFAIR_HD static double store(double v) { return v; }
};
template <> struct Storage<half_t> {
  using acc = float;
  FASTFAIR_HD static float load(half_t v) { return to_float(v); }
  FASTFAIR_HD static half_t store(float v) { return to_half(v); }
};
template <> struct Storage<bfloat16_t> {
  using acc = float;
  FASTFAIR_HD static float load(bfloat16_t v) { return to_float(v); }
  FASTFAIR_HD static bfloat16_t store(float v) { return to_bfloat16(v); }
};

// Calls f with a value of the C++ storage type matching `t` (used only for its type).
template <typename F>
auto dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f64: return f(double{});
    case DType::f16: return f(half_t{});
    case DType::bf16: return f(bfloat16_t{});
    case DType::f32: default: return f(float{});
  }
}

}  // namespace fastfair
