// Owns the numpy-compatible generators declared in numpy_random.h. Every constant and every
// order of operations here is numpy's; a change that "simplifies" one breaks bit-exactness.
#include "data/numpy_random.h"

#include <numeric>

#include "base/error.h"

namespace mt {

// ---------------------------------------------------------------------------------------------
// MT19937 as numpy's legacy RandomState seeds and steps it.

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // init_genrand (Knuth's multiplier), which numpy's mt19937_seed applies to a scalar seed.
  uint32_t s = seed;
  for (int pos = 0; pos < 624; ++pos) {
    key_[pos] = s;
    s = 1812433253u * (s ^ (s >> 30)) + static_cast<uint32_t>(pos + 1);
  }
  pos_ = 624;
}

void NumpyRandomState::regenerate() {
  constexpr int n = 624, m = 397;
  constexpr uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix_a = 0x9908b0dfu;
  for (int i = 0; i < n; ++i) {
    const uint32_t y = (key_[i] & upper) | (key_[(i + 1) % n] & lower);
    key_[i] = key_[(i + m) % n] ^ (y >> 1) ^ ((y & 1u) ? matrix_a : 0u);
  }
  pos_ = 0;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ == 624) regenerate();
  uint32_t y = key_[pos_++];
  // Tempering.
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t NumpyRandomState::next_uint64() {
  // numpy writes `(uint64_t)next(state) << 32 | next(state)`; its builds evaluate the left
  // operand first (the test against numpy's 64-bit randint pins this).
  const uint64_t hi = next_uint32();
  const uint64_t lo = next_uint32();
  return (hi << 32) | lo;
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

std::vector<int64_t> NumpyRandomState::permutation(int64_t n) {
  MT_CHECK(n >= 0) << "permutation of a negative size " << n;
  std::vector<int64_t> out(static_cast<size_t>(n));
  std::iota(out.begin(), out.end(), int64_t{0});
  shuffle(std::span<int64_t>(out));
  return out;
}

// ---------------------------------------------------------------------------------------------
// SeedSequence (numpy/random/bit_generator.pyx), pool size 4, no spawn key.

namespace {
constexpr uint32_t k_init_a = 0x43b0d7e5u, k_mult_a = 0x931e8875u;
constexpr uint32_t k_init_b = 0x8b51f9ddu, k_mult_b = 0x58f38dedu;
constexpr uint32_t k_mix_mult_l = 0xca01f9ddu, k_mix_mult_r = 0x4973f715u;
constexpr int k_xshift = 16;
constexpr int k_pool_size = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= k_mult_a;
  value *= hash_const;
  value ^= value >> k_xshift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = k_mix_mult_l * x - k_mix_mult_r * y;
  result ^= result >> k_xshift;
  return result;
}
}  // namespace

std::vector<uint32_t> numpy_seed_sequence_state(uint64_t entropy, int n_words) {
  // The integer is split into 32-bit words, lowest first; zero is one zero word.
  std::vector<uint32_t> words;
  if (entropy == 0) words.push_back(0);
  for (uint64_t e = entropy; e > 0; e >>= 32) words.push_back(static_cast<uint32_t>(e));

  std::array<uint32_t, k_pool_size> pool{};
  uint32_t hash_const = k_init_a;
  for (int i = 0; i < k_pool_size; ++i)
    pool[i] = hashmix(i < static_cast<int>(words.size()) ? words[i] : 0u, hash_const);
  for (int src = 0; src < k_pool_size; ++src)
    for (int dst = 0; dst < k_pool_size; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (size_t src = k_pool_size; src < words.size(); ++src)
    for (int dst = 0; dst < k_pool_size; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], hash_const));

  std::vector<uint32_t> state(static_cast<size_t>(n_words));
  uint32_t hc = k_init_b;
  for (int i = 0; i < n_words; ++i) {
    uint32_t v = pool[i % k_pool_size];
    v ^= hc;
    hc *= k_mult_b;
    v *= hc;
    v ^= v >> k_xshift;
    state[i] = v;
  }
  return state;
}

// ---------------------------------------------------------------------------------------------
// PCG64 (numpy/random/src/pcg64/pcg64.h, non-emulated 128-bit path).

namespace {
using u128 = numpy_uint128;
constexpr u128 k_pcg_mult = (static_cast<u128>(2549297995355413924ull) << 64) | 4865540595714422341ull;
}  // namespace

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  // generate_state(4, uint64) is 8 uint32 words read as little-endian uint64 pairs.
  const std::vector<uint32_t> w = numpy_seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = static_cast<uint64_t>(w[2 * i]) | (static_cast<uint64_t>(w[2 * i + 1]) << 32);
  const u128 initstate = (static_cast<u128>(v[0]) << 64) | v[1];
  const u128 initseq = (static_cast<u128>(v[2]) << 64) | v[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = (initseq << 1) | 1u;
  state_ = state_ * k_pcg_mult + inc_;
  state_ += initstate;
  state_ = state_ * k_pcg_mult + inc_;
}

uint64_t NumpyPcg64::next_uint64() {
  // Step, then output from the new state (XSL-RR).
  state_ = state_ * k_pcg_mult + inc_;
  const uint64_t hi = static_cast<uint64_t>(state_ >> 64);
  const uint64_t lo = static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64u - rot) & 63u));
}

uint32_t NumpyPcg64::next_uint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return uinteger_;
  }
  const uint64_t next = next_uint64();
  has_uint32_ = true;
  uinteger_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

// ---------------------------------------------------------------------------------------------
// Generator.integers (numpy/random/_bounded_integers.pyx.in -> random_bounded_uint64_fill).

namespace {
uint32_t bounded_lemire_uint32(NumpyPcg64& g, uint32_t rng) {
  const uint32_t rng_excl = rng + 1;
  uint64_t m = static_cast<uint64_t>(g.next_uint32()) * rng_excl;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(g.next_uint32()) * rng_excl;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

uint64_t bounded_lemire_uint64(NumpyPcg64& g, uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  u128 m = static_cast<u128>(g.next_uint64()) * rng_excl;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = static_cast<u128>(g.next_uint64()) * rng_excl;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

// One value of [0, rng] the way random_bounded_uint64_fill (use_masked = false) draws it.
uint64_t bounded_uint64(NumpyPcg64& g, uint64_t rng) {
  if (rng == 0) return 0;
  if (rng < 0xffffffffull) return bounded_lemire_uint32(g, static_cast<uint32_t>(rng));
  if (rng == 0xffffffffull) return g.next_uint32();
  if (rng == UINT64_MAX) return g.next_uint64();
  return bounded_lemire_uint64(g, rng);
}
}  // namespace

std::vector<int64_t> NumpyGenerator::integers(int64_t low, int64_t high, int64_t size) {
  MT_CHECK(low < high) << "integers(low=" << low << ", high=" << high << "): low must be below high";
  MT_CHECK(size >= 0) << "integers: negative size " << size;
  // The closed interval [low, high - 1] as numpy's unsigned range and offset.
  const uint64_t rng = static_cast<uint64_t>(high - 1) - static_cast<uint64_t>(low);
  const uint64_t off = static_cast<uint64_t>(low);
  std::vector<int64_t> out(static_cast<size_t>(size));
  for (auto& v : out) v = static_cast<int64_t>(off + bounded_uint64(bitgen_, rng));
  return out;
}

int64_t NumpyGenerator::integer(int64_t low, int64_t high) { return integers(low, high, 1)[0]; }

}  // namespace mt
