// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator usable from C++ and CUDA, so that
// a random stream is a pure function of (key, counter) and CPU and GPU draw identical numbers.
//
// fastfair's convention: key = the user's 64-bit seed (low word, high word); counter word 2 = the
// round index (32 bits), counter word 3 = an op tag (below), counter words 0-1 = an offset inside
// the op's stream. Ops that draw from the same (seed, round) therefore never share numbers.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair::philox {

struct U32x4 {
  uint32_t v[4];
};

// Stream tags (counter word 3) of the ops that draw random numbers.
constexpr uint32_t kTagSampleClients = 0x53414d50u;  // "SAMP"
constexpr uint32_t kTagAvailability = 0x41564149u;   // "AVAI"
constexpr uint32_t kTagGaussian = 0x47415553u;       // "GAUS": sgld_step, fedevg_server_step
constexpr uint32_t kTagNormal = 0x4e4f524du;         // "NORM": normal_segments

FASTFAIR_HD void mulhilo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  *lo = uint32_t(p);
}

// Ten rounds of Philox4x32 on `ctr` under `key` (the Random123 reference parameters).
FASTFAIR_HD U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(kM0, ctr.v[0], &hi0, &lo0);
    mulhilo32(kM1, ctr.v[2], &hi1, &lo1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return ctr;
}

// The four words drawn for (seed, round, tag) at a 64-bit offset of that stream.
FASTFAIR_HD U32x4 draw(uint64_t seed, uint32_t round, uint32_t tag, uint64_t offset) {
  return philox4x32_10(U32x4{{uint32_t(offset), uint32_t(offset >> 32), round, tag}},
                       uint32_t(seed), uint32_t(seed >> 32));
}

// A 32-bit word as a double in [0, 1): exact, w * 2^-32.
FASTFAIR_HD double to_unit_double(uint32_t w) { return double(w) * 2.3283064365386963e-10; }

}  // namespace fastfair::philox
