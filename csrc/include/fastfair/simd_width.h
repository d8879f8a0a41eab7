// The width of one native vector register for the ISA a csrc/cpu/simd/ copy is compiled for:
// 64 bytes with AVX-512, 32 with AVX2, 16 otherwise. Kernels size their GCC vector types by it.
#pragma once

namespace fastfair::cpu::FASTFAIR_ISA {

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX2__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif

}  // namespace fastfair::cpu::FASTFAIR_ISA
