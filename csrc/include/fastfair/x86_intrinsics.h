// The x86 intrinsics (<immintrin.h>) for a csrc/cpu/simd/ copy, nothing elsewhere. Include it
// after the standard headers: it silences, for the rest of the file, GCC 12's warnings on the
// deliberately undefined pass-through operand inside AVX-512 intrinsics.
#pragma once

#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif
