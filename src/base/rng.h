// Owns the counter-based random generator (Philox4x32-10, Salmon et al. 2011). A value depends
// only on (seed, stream, element index), never on which rank or thread draws it: this is what
// makes weight init and dropout masks identical under every parallel layout (DESIGN invariant 2).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace mt {

using Philox4 = std::array<uint32_t, 4>;

// One Philox4x32-10 block for a 128-bit counter and a 64-bit key.
Philox4 philox4x32(Philox4 counter, uint64_t key);

// A named stream of random numbers: draw(i) is a pure function of (seed, stream, i).
struct RngStream {
  uint64_t seed = 0;
  uint64_t stream = 0;

  // Uniform in [0, 1) with 24 random bits, for element i.
  float uniform(uint64_t i) const;
  // Standard normal (Box-Muller on a pair of uniforms), for element i.
  float normal(uint64_t i) const;
};

// Stable 64-bit id for a name (FNV-1a), so streams can be keyed by parameter names.
uint64_t stream_id(std::string_view name);

}  // namespace mt
