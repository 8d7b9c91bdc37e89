// Philox4x32-10 (Salmon et al. 2011) as host/device arithmetic: one block of four 32-bit words for
// a 128-bit counter and a 64-bit key. RngStream (base/rng.h) and the CUDA dropout kernels both draw
// through it, so a CUDA run sees the CPU run's masks bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/hd.h"

namespace mt {

struct PhiloxBlock {
  uint32_t w[4];
};

MT_HD inline PhiloxBlock philox4x32_10(PhiloxBlock c, uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c.w[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c.w[2];
    c = {{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ k0, static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ k1, static_cast<uint32_t>(p0)}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Block `index` of the stream (seed, stream): counter = (index, stream), key = seed.
MT_HD inline PhiloxBlock philox_stream_block(uint64_t seed, uint64_t stream, uint64_t index) {
  return philox4x32_10({{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}},
                       seed);
}

// Element i's 24 random bits: word i % 4 of block i / 4, top 24 bits (uniform = bits / 2^24).
MT_HD inline uint32_t philox_bits24(uint64_t seed, uint64_t stream, uint64_t i) {
  return philox_stream_block(seed, stream, i >> 2).w[i & 3] >> 8;
}

// Dropout keeps element i when uniform(i) >= p, i.e. when its 24 bits reach ceil(p · 2^24).
MT_HD inline uint32_t dropout_threshold(float p) {
  return static_cast<uint32_t>(ceil(static_cast<double>(p) * 16777216.0));
}

}  // namespace mt
