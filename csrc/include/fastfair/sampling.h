// Client sampling: m distinct ids out of K in O(m), and Bernoulli availability per client, both a
// pure function of (seed, round) so that CPU and CUDA give identical draws.
//
// sample_clients: ids[j] = P(j) for j < m, where P is a keyed pseudo-random permutation of
// [0, K): an 8-round alternating Feistel network on b = max(2, ceil(log2 K)) bits whose round keys
// come from Philox4x32-10 at (seed, round), restricted to [0, K) by cycle walking (values >= K are
// encrypted again; fewer than two steps on average since 2^b < 2K). P is a bijection, so the ids
// are distinct by construction, and no O(K) permutation is ever stored.
//
// availability: mask[i] = (u_i < prob_i), u_i = word (i mod 4) of Philox at offset floor(i / 4),
// as w * 2^-32.
#pragma once

#include <cstdint>

#include "fastfair/common.h"
#include "fastfair/philox.h"

namespace fastfair {

constexpr int kFeistelRounds = 8;

struct FeistelKey {
  uint64_t num_clients;  // K >= 1
  int left_bits, right_bits;  // b = left + right, left = b / 2
  uint32_t round_key[kFeistelRounds];
};

FASTFAIR_HD FeistelKey make_feistel_key(uint64_t num_clients, uint64_t seed, uint32_t round) {
  FeistelKey k{};
  k.num_clients = num_clients;
  int bits = 2;
  while (bits < 64 && (uint64_t(1) << bits) < num_clients) ++bits;
  k.left_bits = bits / 2;
  k.right_bits = bits - k.left_bits;
  const philox::U32x4 a = philox::draw(seed, round, philox::kTagSampleClients, 0);
  const philox::U32x4 b = philox::draw(seed, round, philox::kTagSampleClients, 1);
  for (int i = 0; i < 4; ++i) {
    k.round_key[i] = a.v[i];
    k.round_key[4 + i] = b.v[i];
  }
  return k;
}

// SplitMix64's finaliser: a bijective 64-bit mixer, the Feistel round function.
FASTFAIR_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One pass of the Feistel permutation of [0, 2^b). The halves (A, B) have (left, right) bits and
// swap sizes every round: (A, B) -> (B, A + F_r(B) mod 2^|A|). With an even number of rounds the
// layout ends as it began.
FASTFAIR_HD uint64_t feistel_encrypt(const FeistelKey& k, uint64_t x) {
  int abits = k.left_bits, bbits = k.right_bits;
  uint64_t a = x >> bbits, b = x & ((uint64_t(1) << bbits) - 1);
  for (int r = 0; r < kFeistelRounds; ++r) {
    const uint64_t f = mix64(b ^ (uint64_t(k.round_key[r]) << 32) ^ uint64_t(r));
    const uint64_t c = (a + f) & ((uint64_t(1) << abits) - 1);
    a = b;
    b = c;
    const int t = abits;
    abits = bbits;
    bbits = t;
  }
  return (a << bbits) | b;
}

// The j-th sampled id: the permutation of [0, K) induced by cycle walking.
FASTFAIR_HD uint64_t sampled_id(const FeistelKey& k, uint64_t j) {
  uint64_t y = feistel_encrypt(k, j);
  while (y >= k.num_clients) y = feistel_encrypt(k, y);
  return y;
}

struct AvailabilityArgs {
  int64_t num_clients;   // K
  const void* prob;      // [K] float32 or float64, or nullptr for the scalar below
  DType prob_dtype;
  double prob_scalar;    // used when prob == nullptr
  uint64_t seed;
  uint32_t round;
  uint8_t* mask;         // [K] output, 1 = available
};

namespace cpu {
// ids: [m] int64. Requires m <= K.
Status sample_clients(int64_t num_clients, int64_t m, uint64_t seed, uint32_t round, int64_t* ids);
Status availability(const AvailabilityArgs& args);
}  // namespace cpu

namespace cuda {
Status sample_clients(int64_t num_clients, int64_t m, uint64_t seed, uint32_t round, int64_t* ids,
                      void* stream);
Status availability(const AvailabilityArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
