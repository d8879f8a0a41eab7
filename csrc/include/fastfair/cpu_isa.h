// Run-time choice of the CPU instruction set. Kernel files under csrc/cpu/simd/ are compiled once
// per ISA level, each copy inside namespace fastfair::cpu::FASTFAIR_ISA (isa_base, isa_avx2,
// isa_avx512); the op's entry point picks the best copy the running CPU supports.
#pragma once

namespace fastfair::cpu {

enum class Isa : int { base = 0, avx2 = 1, avx512 = 2 };

// The best level compiled into this build and supported by this CPU. FASTFAIR_CPU_ISA=base|avx2|
// avx512 in the environment caps it (for testing and benchmarks).
Isa active_isa();
// Caps the level for the rest of the process (kernels already running keep theirs) and returns
// the level now active: `cap`, or the best below it that this build and CPU have. For tests that
// compare the per-ISA copies of a kernel in one process.
Isa set_isa_cap(Isa cap);
const char* isa_name(Isa isa);

}  // namespace fastfair::cpu

// Declares the per-ISA copies of a kernel entry point and defines the dispatching entry point.
//   FASTFAIR_CPU_DISPATCH(Status, weighted_average, (const AverageArgs& a), (a))
#if defined(FASTFAIR_HAVE_AVX512)
#define FASTFAIR_CPU_DISPATCH(ret, name, params, args)                      \
  namespace isa_base { ret name params; }                                    \
  namespace isa_avx2 { ret name params; }                                    \
  namespace isa_avx512 { ret name params; }                                  \
  ret name params {                                                          \
    switch (active_isa()) {                                                  \
      case Isa::avx512: return isa_avx512::name args;                        \
      case Isa::avx2: return isa_avx2::name args;                            \
      default: return isa_base::name args;                                   \
    }                                                                        \
  }
#else
#define FASTFAIR_CPU_DISPATCH(ret, name, params, args) \
  namespace isa_base { ret name params; }               \
  ret name params { return isa_base::name args; }
#endif
