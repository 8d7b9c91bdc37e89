#include "base/rng.h"

#include <cmath>

namespace mt {

namespace {
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

inline uint32_t mulhi(uint32_t a, uint32_t b, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *lo = static_cast<uint32_t>(p);
  return static_cast<uint32_t>(p >> 32);
}
}  // namespace

Philox4 philox4x32(Philox4 c, uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t lo0, lo1;
    const uint32_t hi0 = mulhi(kMul0, c[0], &lo0);
    const uint32_t hi1 = mulhi(kMul1, c[2], &lo1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

namespace {
inline Philox4 block(const RngStream& s, uint64_t block_index) {
  return philox4x32({static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
                     static_cast<uint32_t>(s.stream), static_cast<uint32_t>(s.stream >> 32)},
                    s.seed);
}
inline float to_unit(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }
}  // namespace

float RngStream::uniform(uint64_t i) const { return to_unit(block(*this, i >> 2)[i & 3]); }

float RngStream::normal(uint64_t i) const {
  const Philox4 r = block(*this, i >> 1);
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
