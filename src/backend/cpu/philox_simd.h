// Philox4x32-10 for 16 consecutive blocks side by side, so the rounds vectorise (~15x faster per
// element than RngStream::uniform). Element i of an RngStream is word i & 3 of block i >> 2 with
// counter {block, stream} and key seed (base/rng.cpp); the kernels' tests compare what they draw
// with RngStream::uniform element by element, so a drift between the two fails loudly.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/math/dropout_math.h"
#include "base/philox.h"
#include "base/rng.h"

namespace mt::cpu {

constexpr int kPhiloxLanes = 16;

// words[4·l + j] = word j of Philox block first_block + l, for l < kPhiloxLanes.
inline void philox_lanes(const RngStream& rng, uint64_t first_block, uint32_t* words /* [4 * kPhiloxLanes] */) {
  // 32-bit words held in 64-bit lanes: the 32×32→64 products then vectorise as plain 64-bit ops.
  constexpr uint64_t kLow = 0xffffffffu;
  alignas(64) uint64_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
  for (int l = 0; l < kPhiloxLanes; ++l) {
    const uint64_t block = first_block + static_cast<uint64_t>(l);
    c0[l] = block & kLow;
    c1[l] = block >> 32;
    c2[l] = rng.stream & kLow;
    c3[l] = rng.stream >> 32;
  }
  uint64_t k0 = rng.seed & kLow, k1 = rng.seed >> 32;
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < kPhiloxLanes; ++l) {
      const uint64_t p0 = 0xD2511F53ull * c0[l];
      const uint64_t p1 = 0xCD9E8D57ull * c2[l];
      const uint64_t n0 = (p1 >> 32) ^ c1[l] ^ k0;
      const uint64_t n2 = (p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = p1 & kLow;
      c3[l] = p0 & kLow;
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 = (k0 + 0x9E3779B9u) & kLow;
    k1 = (k1 + 0xBB67AE85u) & kLow;
  }
  for (int l = 0; l < kPhiloxLanes; ++l) {
    words[4 * l + 0] = static_cast<uint32_t>(c0[l]);
    words[4 * l + 1] = static_cast<uint32_t>(c1[l]);
    words[4 * l + 2] = static_cast<uint32_t>(c2[l]);
    words[4 * l + 3] = static_cast<uint32_t>(c3[l]);
  }
}

// keep[e − first] = (rng.uniform(e) >= p) for e in [first, first + count), via 24-bit thresholds:
// uniform(e) = (word >> 8)·2^−24 >= p  ⟺  (word >> 8) >= ceil(p·2^24).
template <typename T>
inline void philox_keep(const RngStream& rng, uint64_t first, int64_t count, float p, T on, T* out) {
  const uint32_t threshold = dropout_threshold(p);
  alignas(64) uint32_t words[4 * kPhiloxLanes];
  const uint64_t end = first + static_cast<uint64_t>(count);
  for (uint64_t chunk = first & ~uint64_t{4 * kPhiloxLanes - 1}; chunk < end; chunk += 4 * kPhiloxLanes) {
    philox_lanes(rng, chunk >> 2, words);
    const uint64_t lo = chunk > first ? chunk : first;
    const uint64_t hi = chunk + 4 * kPhiloxLanes < end ? chunk + 4 * kPhiloxLanes : end;
    for (uint64_t e = lo; e < hi; ++e) out[e - first] = dropout_keeps(words[e - chunk] >> 8, threshold) ? on : T(0);
  }
}

}  // namespace mt::cpu
