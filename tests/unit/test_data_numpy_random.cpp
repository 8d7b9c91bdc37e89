// data/numpy_random: our MT19937 RandomState (raw draws, random_interval on both its 32- and 64-bit
// paths, shuffle, permutation) and default_rng (SeedSequence, PCG64, Generator.integers) against
// values numpy itself produced (tests/golden/data_numpy_random.txt, written by
// tools/ref/gpt_dataset_ref.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/numpy_random.h"
#include "text_fixture.h"

namespace mt {
namespace {

using test::Record;
using test::load_text_fixture;

std::vector<Record> records(const std::string& key) {
  static const std::vector<Record> all = load_text_fixture("data_numpy_random.txt");
  std::vector<Record> out;
  for (const Record& r : all)
    if (r.key == key) out.push_back(r);
  return out;
}

// The fixture script's order-sensitive hash (mod 2^64).
template <typename T>
uint64_t hash_values(const std::vector<T>& values) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (T v : values) h = h * 1000003ull + static_cast<uint64_t>(static_cast<int64_t>(v));
  return h;
}

TEST(NumpyRandomState, RawMt19937MatchesNumpy) {
  const auto recs = records("mt_raw");
  ASSERT_EQ(recs.size(), 6u);
  for (const Record& r : recs) {
    NumpyRandomState rs(static_cast<uint32_t>(r.u(0)));
    std::vector<uint32_t> draws(2000);  // past 624: exercises the state refill
    for (auto& d : draws) d = rs.next_uint32();
    EXPECT_EQ(hash_values(draws), r.u(1)) << "seed " << r.fields[0];
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(draws[k], r.u(2 + k)) << "seed " << r.fields[0] << " draw " << k;
  }
}

TEST(NumpyRandomState, PermutationMatchesNumpy) {
  const auto recs = records("permutation");
  ASSERT_EQ(recs.size(), 42u);
  for (const Record& r : recs) {
    NumpyRandomState rs(static_cast<uint32_t>(r.u(0)));
    const int64_t n = r.i(1);
    const std::vector<int64_t> p = rs.permutation(n);
    ASSERT_EQ(static_cast<int64_t>(p.size()), n);
    for (int64_t k = 0; k < n; ++k) EXPECT_EQ(p[k], r.i(2 + k)) << "seed " << r.fields[0] << " n " << n;
  }
  const auto hashed = records("permutation_hash");
  ASSERT_EQ(hashed.size(), 12u);
  for (const Record& r : hashed) {
    NumpyRandomState rs(static_cast<uint32_t>(r.u(0)));
    EXPECT_EQ(hash_values(rs.permutation(r.i(1))), r.u(2)) << "seed " << r.fields[0] << " n " << r.fields[1];
  }
}

TEST(NumpyRandomState, ShuffleOfInt32ArrayMatchesNumpy) {
  const auto recs = records("shuffle_int32_x3");
  ASSERT_EQ(recs.size(), 1u);
  const Record& r = recs[0];
  std::vector<int32_t> a(r.u(1));
  for (size_t k = 0; k < a.size(); ++k) a[k] = static_cast<int32_t>(3 * k);
  NumpyRandomState rs(static_cast<uint32_t>(r.u(0)));
  rs.shuffle(std::span<int32_t>(a));
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], r.i(2 + k)) << k;
}

TEST(NumpyRandomState, RandomIntervalBothWidthsMatchNumpy) {
  const auto recs = records("interval");
  ASSERT_EQ(recs.size(), 3u);
  for (const Record& r : recs) {
    NumpyRandomState rs(static_cast<uint32_t>(r.u(0)));
    ASSERT_EQ(r.fields.size() % 2, 1u);
    for (size_t k = 1; k + 1 < r.fields.size(); k += 2) {
      const uint64_t max = r.u(k);
      const uint64_t v = rs.random_interval(max);
      EXPECT_LE(v, max);
      EXPECT_EQ(v, r.u(k + 1)) << "seed " << r.fields[0] << " max " << max;
    }
  }
}

TEST(NumpyRandomState, DifferentSeedsDiffer) {
  NumpyRandomState a(1234), b(1235);
  EXPECT_NE(a.permutation(100), b.permutation(100));
  NumpyRandomState c(0);
  EXPECT_EQ(c.random_interval(0), 0u);
}

TEST(NumpySeedSequence, GenerateStateMatchesNumpy) {
  const auto recs = records("seedseq");
  ASSERT_EQ(recs.size(), 7u);
  for (const Record& r : recs) {
    const std::vector<uint32_t> s = numpy_seed_sequence_state(r.u(0), 8);
    ASSERT_EQ(s.size(), 8u);
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(s[k], r.u(1 + k)) << "entropy " << r.fields[0] << " word " << k;
  }
}

TEST(NumpyPcg64, RawAndHalfBufferedDrawsMatchNumpy) {
  const auto raw = records("pcg_raw");
  ASSERT_EQ(raw.size(), 4u);
  for (const Record& r : raw) {
    NumpyPcg64 g(r.u(0));
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(g.next_uint64(), r.u(1 + k)) << "seed " << r.fields[0] << " draw " << k;
  }
  const auto n32 = records("pcg_next32");
  ASSERT_EQ(n32.size(), 4u);
  for (const Record& r : n32) {
    NumpyPcg64 g(r.u(0));
    for (size_t k = 0; k < 7; ++k) EXPECT_EQ(g.next_uint32(), r.u(1 + k)) << "seed " << r.fields[0] << " draw " << k;
  }
}

TEST(NumpyGenerator, IntegersMatchNumpy) {
  const auto recs = records("integers");
  ASSERT_EQ(recs.size(), 30u);
  for (const Record& r : recs) {
    NumpyGenerator g(r.u(0));
    const int64_t low = r.i(1), high = r.i(2), size = r.i(3);
    const std::vector<int64_t> v = g.integers(low, high, size);
    ASSERT_EQ(static_cast<int64_t>(v.size()), size);
    for (int64_t k = 0; k < size; ++k) {
      EXPECT_GE(v[k], low);
      EXPECT_LT(v[k], high);
      EXPECT_EQ(v[k], r.i(4 + k)) << "seed " << r.fields[0] << " [" << low << ", " << high << ") #" << k;
    }
  }
}

TEST(NumpyGenerator, MixedWidthScalarStreamMatchesNumpy) {
  const auto recs = records("integers_seq");
  ASSERT_EQ(recs.size(), 3u);
  for (const Record& r : recs) {
    NumpyGenerator g(r.u(0));
    ASSERT_EQ((r.fields.size() - 1) % 3, 0u);
    for (size_t k = 1; k < r.fields.size(); k += 3)
      EXPECT_EQ(g.integer(r.i(k), r.i(k + 1)), r.i(k + 2))
          << "seed " << r.fields[0] << " call " << (k - 1) / 3 << " [" << r.fields[k] << ", " << r.fields[k + 1] << ")";
  }
}

TEST(NumpyGenerator, MockLengthsMatchNumpy) {
  // MockGPTLowLevelDataset: default_rng(0).integers(1, 4096, size=100000, dtype=int32).
  const auto recs = records("mock_lengths");
  ASSERT_EQ(recs.size(), 1u);
  const Record& r = recs[0];
  NumpyGenerator g(0);
  const std::vector<int64_t> v = g.integers(1, 4096, 100000);
  ASSERT_EQ(static_cast<int64_t>(v.size()), r.i(0));
  int64_t sum = 0;
  for (int64_t x : v) sum += x;
  EXPECT_EQ(sum, r.i(1));
  EXPECT_EQ(hash_values(v), r.u(2));
  for (size_t k = 0; k < 16; ++k) EXPECT_EQ(v[k], r.i(3 + k)) << k;
  for (size_t k = 0; k < 4; ++k) EXPECT_EQ(v[v.size() - 4 + k], r.i(19 + k)) << k;
}

}  // namespace
}  // namespace mt
