#include "base/rng.h"

#include <cmath>

#include "base/philox.h"

namespace mt {

Philox4 philox4x32(Philox4 c, uint64_t key) {
  const PhiloxBlock r = philox4x32_10({{c[0], c[1], c[2], c[3]}}, key);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
}

float RngStream::uniform(uint64_t i) const {
  return static_cast<float>(philox_bits24(seed, stream, i)) * (1.0f / 16777216.0f);
}

float RngStream::normal(uint64_t i) const {
  const PhiloxBlock block = philox_stream_block(seed, stream, i >> 1);
  const uint32_t* r = block.w;
  const int k = static_cast<int>(i & 1) * 2;
  // u1 in (0, 1] so log(u1) is finite.
  const double u1 = (static_cast<double>(r[k] >> 8) + 1.0) * (1.0 / 16777216.0);
  const double u2 = static_cast<double>(r[k + 1] >> 8) * (1.0 / 16777216.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

uint64_t stream_id(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace mt
