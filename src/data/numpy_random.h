// Owns bit-exact reimplementations of the two numpy random generators Megatron's datasets use, so
// that our document/shuffle indices and mock data equal Megatron's to the last element:
//   - NumpyRandomState: legacy `numpy.random.RandomState(seed)` with an integer seed (MT19937 seeded
//     by init_genrand), its bounded draw `random_interval`, `shuffle` and `permutation`
//     (gpt_dataset.py builds the document and shuffle indices with it);
//   - NumpyGenerator: `numpy.random.default_rng(seed)` (SeedSequence -> PCG64) and
//     `Generator.integers(low, high, size)` (MockGPTLowLevelDataset draws its lengths with it).
// The algorithms follow numpy's C sources (mt19937.c, pcg64.h, distributions.c, bit_generator.pyx,
// mtrand.pyx); tests/unit/test_data_numpy_random.cpp checks them against numpy's own output.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace mt {

// GCC/Clang's 128-bit integer; __extension__ keeps -Wpedantic quiet about it.
__extension__ typedef unsigned __int128 numpy_uint128;

// numpy.random.RandomState(seed) for an integer seed in [0, 2^32).
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed);

  // One raw MT19937 output (numpy's next_uint32).
  uint32_t next_uint32();
  // Two outputs, the first in the high half (numpy's mt19937_next64).
  uint64_t next_uint64();

  // numpy's legacy random_interval(max): uniform in [0, max] by masked rejection sampling on
  // 32-bit draws, or on 64-bit draws when max > 2^32 - 1. This is the draw legacy shuffle uses,
  // and equals RandomState.randint(0, max + 1, dtype=int64) for max > 0.
  uint64_t random_interval(uint64_t max);

  // Legacy RandomState.shuffle of a 1-D array: for i = n-1 down to 1, swap x[i] with
  // x[random_interval(i)]. The element type does not affect the draws.
  template <typename T>
  void shuffle(std::span<T> x) {
    for (size_t i = x.size(); i-- > 1;) {
      const size_t j = static_cast<size_t>(random_interval(i));
      std::swap(x[i], x[j]);
    }
  }

  // RandomState.permutation(n): shuffle(arange(n)).
  std::vector<int64_t> permutation(int64_t n);

 private:
  void regenerate();  // refills the 624-word state (MT19937 "twist")

  std::array<uint32_t, 624> key_{};
  int pos_ = 624;
};

// numpy.random.SeedSequence(entropy).generate_state(n_words, uint32) for a non-negative integer
// entropy with no spawn key and the default pool size of 4.
std::vector<uint32_t> numpy_seed_sequence_state(uint64_t entropy, int n_words);

// The PCG64 bit generator as numpy seeds and steps it (XSL-RR output of a 128-bit LCG).
class NumpyPcg64 {
 public:
  // Seeded from SeedSequence(seed).generate_state(4, uint64), as PCG64(seed) does.
  explicit NumpyPcg64(uint64_t seed);
  uint64_t next_uint64();
  // numpy buffers the upper half of a 64-bit draw and hands it out on the next 32-bit request.
  uint32_t next_uint32();

 private:
  numpy_uint128 state_ = 0;
  numpy_uint128 inc_ = 0;
  bool has_uint32_ = false;
  uint32_t uinteger_ = 0;
};

// numpy.random.default_rng(seed): a Generator over PCG64.
class NumpyGenerator {
 public:
  explicit NumpyGenerator(uint64_t seed) : bitgen_(seed) {}

  // Generator.integers(low, high, size) (endpoint=False): uniform in [low, high). numpy uses
  // Lemire's multiply-shift rejection on 32-bit draws when high - 1 - low < 2^32 - 1, a raw 32-bit
  // draw when it equals 2^32 - 1, and 64-bit Lemire beyond. The values are the same for
  // dtype=int32 and the default int64 (both route a sub-2^32 range to the same 32-bit path).
  std::vector<int64_t> integers(int64_t low, int64_t high, int64_t size);
  // The scalar form, Generator.integers(low, high) (size=None); it draws exactly like size=1.
  int64_t integer(int64_t low, int64_t high);

  NumpyPcg64& bit_generator() { return bitgen_; }

 private:
  NumpyPcg64 bitgen_;
};

}  // namespace mt
