#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {
namespace {

Isa detect() {
  Isa best = Isa::base;
#if defined(FASTFAIR_HAVE_AVX512)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::avx2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    best = Isa::avx512;
#endif
  if (const char* cap = std::getenv("FASTFAIR_CPU_ISA")) {
    Isa limit = best;
    if (std::strcmp(cap, "base") == 0) limit = Isa::base;
    if (std::strcmp(cap, "avx2") == 0) limit = Isa::avx2;
    if (static_cast<int>(limit) < static_cast<int>(best)) best = limit;
  }
  return best;
}

// The active level, -1 until the first kernel call detects it.
std::atomic<int> active{-1};

}  // namespace

Isa active_isa() {
  int isa = active.load(std::memory_order_relaxed);
  if (isa < 0) {
    isa = static_cast<int>(detect());
    active.store(isa, std::memory_order_relaxed);
  }
  return static_cast<Isa>(isa);
}

Isa set_isa_cap(Isa cap) {
  const int isa = std::min(static_cast<int>(cap), static_cast<int>(detect()));
  active.store(isa, std::memory_order_relaxed);
  return static_cast<Isa>(isa);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    default: return "base";
  }
}

}  // namespace fastfair::cpu
