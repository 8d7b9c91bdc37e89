// Tests for ops/dropout.h: the mask is exactly rng.uniform(offset + i) >= p, the keep fraction is
// 1 − p, a shard drawn at its global offset reproduces the slice of the full mask (DESIGN
// invariant 2), the mask drawn alone equals the forward's, p = 0 is the identity, dropout_add, the backward (reference and finite
// differences) and argument errors.
#include "ops/dropout.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "testing.h"

namespace mt::test {
namespace {

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// Every mask bit against the documented rule, and out against inp/(1 − p) in double.  The kernel
// multiplies by the f32 reciprocal, so out may differ from the exact quotient by ~1 ulp: 1e-6 rel.
void check_mask_rule(int64_t n, float p, uint64_t offset) {
  const RngStream rng{1234, 56};
  HostTensor inp = randn({n}, 151), out = zeros({n}), mask = zeros({n}, DType::u8);
  dropout_fwd(out.view(), mask.view(), inp.view(), p, rng, offset);
  int64_t mismatches = 0;
  std::vector<double> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = rng.uniform(offset + static_cast<uint64_t>(i)) >= p;
    mismatches += (mask.u8()[i] != (keep ? 1 : 0));
    ref[i] = keep ? inp.f32()[i] / (1.0 - p) : 0.0;
  }
  EXPECT_EQ(mismatches, 0) << "mask bits differ from rng.uniform(offset + i) >= p";
  expect_close(out.f32(), ref, 1e-30, 1e-6, "dropout out");  // dropped: exactly 0
}

// n not a multiple of 4 (one Philox block) nor of any SIMD width; offsets in every block lane.
TEST(Dropout, MaskFollowsRngRule) {
  for (uint64_t offset : {0ull, 1ull, 2ull, 3ull, 13ull, (1ull << 33) + 5}) check_mask_rule(1001, 0.3f, offset);
  check_mask_rule(40000, 0.1f, 7);  // several parallel chunks
  // The boundary: with p equal to element 5's own uniform, that element is kept (>=, not >).
  const RngStream rng{1234, 56};
  check_mask_rule(16, rng.uniform(13 + 5), 13);
}

// Rows of [s, b, h] keyed by (sample, position): element (r, c) draws
// rng.uniform(((first_sample + r % b)·S + first_position + r / b)·h + c), in every form of the op;
// and a sample's rows draw the same bits whichever micro-batch (grouping) and position shard hold them.
TEST(Dropout, RowsKeyedBySampleAndPosition) {
  const RngStream rng{4321, 8};
  const int64_t S = 12, b = 3, h = 37;  // h not a multiple of a Philox block
  const float p = 0.4f;
  const DropoutRows rows(100, b, S, 0);
  HostTensor inp = randn({S, b, h}, 3), res = randn({S, b, h}, 4), out = zeros({S, b, h}), mask = zeros({S, b, h}, DType::u8);
  HostTensor added = zeros({S, b, h}), added_mask = zeros({S, b, h}, DType::u8), alone = zeros({S, b, h}, DType::u8);
  dropout_fwd(out.view(), mask.view(), inp.view(), p, rng, rows);
  dropout_add_fwd(added.view(), added_mask.view(), inp.view(), res.view(), p, rng, rows);
  dropout_mask(alone.view(), p, rng, rows);
  int64_t mismatches = 0;
  for (int64_t t = 0; t < S; ++t)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t c = 0; c < h; ++c) {
        const int64_t i = (t * b + j) * h + c;
        const bool keep = rng.uniform(static_cast<uint64_t>(((100 + j) * S + t) * h + c)) >= p;
        mismatches += (mask.u8()[i] != keep) + (added_mask.u8()[i] != keep) + (alone.u8()[i] != keep);
        EXPECT_EQ(out.f32()[i], keep ? inp.f32()[i] * (1.0f / (1.0f - p)) : 0.0f);
      }
  EXPECT_EQ(mismatches, 0);
  // Sample 101 alone (batch 1), its positions 6.. as a sequence-parallel shard: the same bits.
  HostTensor shard = zeros({S / 2, 1, h}, DType::u8);
  dropout_mask(shard.view(), p, rng, DropoutRows(101, 1, S, S / 2));
  for (int64_t t = 0; t < S / 2; ++t)
    for (int64_t c = 0; c < h; ++c)
      EXPECT_EQ(shard.u8()[t * h + c], mask.u8()[((S / 2 + t) * b + 1) * h + c]) << "position " << S / 2 + t;
  // Rows that do not fit the sequences are refused.
  EXPECT_THROW(dropout_mask(alone.view(), p, rng, DropoutRows(0, b, S, 1)), Error);
  EXPECT_THROW(dropout_mask(alone.view(), p, rng, DropoutRows(0, 5, S, 0)), Error);
}

// dropout_mask draws the very mask dropout_fwd saves (recomputation relies on it), p = 0 included.
TEST(Dropout, MaskAloneEqualsForwardMask) {
  const RngStream rng{99, 3};
  for (float p : {0.0f, 0.2f})
    for (int64_t n : {int64_t{7}, int64_t{40001}}) {
      HostTensor inp = randn({n}, 171), out = zeros({n}), mask = zeros({n}, DType::u8);
      HostTensor alone = zeros({n}, DType::u8);
      dropout_fwd(out.view(), mask.view(), inp.view(), p, rng, 11);
      dropout_mask(alone.view(), p, rng, 11);
      EXPECT_EQ(std::memcmp(alone.u8(), mask.u8(), static_cast<size_t>(n)), 0) << "p = " << p << ", n = " << n;
    }
}

// On 2^20 elements the kept fraction is 1 − p within 6 binomial standard deviations
// (σ = √(p(1 − p)/n) ≈ 3e-4 for p = 0.1): a generator or threshold bug (e.g. keep < p) fails.
TEST(Dropout, KeepFractionMatchesOneMinusP) {
  const int64_t n = 1 << 20;
  for (float p : {0.1f, 0.5f}) {
    HostTensor inp = randn({n}, 161), out = zeros({n}), mask = zeros({n}, DType::u8);
    dropout_fwd(out.view(), mask.view(), inp.view(), p, RngStream{7, 8}, 0);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += mask.u8()[i];
    const double frac = static_cast<double>(kept) / n, sigma = std::sqrt(p * (1.0 - p) / n);
    EXPECT_NEAR(frac, 1.0 - p, 6.0 * sigma) << "p = " << p;
  }
}

// Shards of one tensor, each drawn with its own global offset, give bit-identical masks and
// outputs to the matching slice of the unsharded call.
TEST(Dropout, ShardWithOffsetReproducesSliceOfFullMask) {
  const int64_t n = 10007;
  const uint64_t base = 1000;  // the full tensor itself starts at global element 1000
  const RngStream rng{99, stream_id("layer.3.hidden_dropout")};
  HostTensor inp = randn({n}, 171), out = zeros({n}), mask = zeros({n}, DType::u8);
  dropout_fwd(out.view(), mask.view(), inp.view(), 0.25f, rng, base);
  const int64_t cuts[] = {0, 3001, 3002, 7777, n};  // unaligned shard boundaries
  for (int k = 0; k + 1 < 5; ++k) {
    const int64_t begin = cuts[k], len = cuts[k + 1] - cuts[k];
    HostTensor shard_out = zeros({len}), shard_mask = zeros({len}, DType::u8);
    const TensorView shard_inp = inp.view().rows(begin, len);
    dropout_fwd(shard_out.view(), shard_mask.view(), shard_inp, 0.25f, rng, base + static_cast<uint64_t>(begin));
    EXPECT_EQ(0, std::memcmp(shard_mask.u8(), mask.u8() + begin, static_cast<size_t>(len))) << "shard " << k;
    EXPECT_EQ(0, std::memcmp(shard_out.f32(), out.f32() + begin, static_cast<size_t>(len) * 4)) << "shard " << k;
  }
}

TEST(Dropout, DifferentStreamsDrawDifferentMasks) {
  const int64_t n = 4096;
  HostTensor inp = randn({n}, 181), out = zeros({n}), a = zeros({n}, DType::u8), b = zeros({n}, DType::u8);
  dropout_fwd(out.view(), a.view(), inp.view(), 0.5f, RngStream{1, 1}, 0);
  dropout_fwd(out.view(), b.view(), inp.view(), 0.5f, RngStream{1, 2}, 0);
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += a.u8()[i] == b.u8()[i];
  EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 0.05);  // independent masks agree half the time
}

TEST(Dropout, ZeroProbabilityIsIdentity) {
  const int64_t n = 1001;
  HostTensor inp = randn({n}, 191), out = zeros({n}), mask = zeros({n}, DType::u8);
  dropout_fwd(out.view(), mask.view(), inp.view(), 0.0f, RngStream{3, 4}, 17);
  EXPECT_EQ(0, std::memcmp(out.f32(), inp.f32(), static_cast<size_t>(n) * 4));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(mask.u8()[i], 1) << "element " << i;
  HostTensor dinp = zeros({n}), dout = randn({n}, 192);
  dropout_bwd(dinp.view(), dout.view(), mask.view(), 0.0f);
  EXPECT_EQ(0, std::memcmp(dinp.f32(), dout.f32(), static_cast<size_t>(n) * 4));
}

// Backward: dinp += mask·dout/(1 − p), onto random start values.  Finite differences of Σ out·w
// (same rng and offset each call, so the mask is fixed and the loss linear): only f32 rounding of
// one output remains (~1e-7/(2h)); 1e-4 abs + 1e-4 rel, against O(1) errors from a wrong scale,
// an inverted mask or a sign flip.
// A layer built without dropout keeps no mask: with p = 0 an empty mask gives bitwise what an
// all-ones mask gives, in every op; with p > 0 it is refused.
TEST(Dropout, EmptyMaskIsDropoutOff) {
  const RngStream rng{1234, 56};
  const int64_t n = 1001;
  HostTensor inp = randn({n}, 3), res = randn({n}, 4), dout = randn({n}, 5), mask = zeros({n}, DType::u8);
  HostTensor out_masked = zeros({n}), out_empty = zeros({n}), d_masked = randn({n}, 6), d_empty = randn({n}, 6);
  const TensorView none;
  dropout_fwd(out_masked.view(), mask.view(), inp.view(), 0.0f, rng, 0);
  dropout_fwd(out_empty.view(), none, inp.view(), 0.0f, rng, 0);
  EXPECT_EQ(std::memcmp(out_masked.f32(), out_empty.f32(), n * 4), 0) << "dropout_fwd";
  dropout_add_fwd(out_masked.view(), mask.view(), inp.view(), res.view(), 0.0f, rng, 0);
  dropout_add_fwd(out_empty.view(), none, inp.view(), res.view(), 0.0f, rng, 0);
  EXPECT_EQ(std::memcmp(out_masked.f32(), out_empty.f32(), n * 4), 0) << "dropout_add_fwd";
  dropout_bwd(d_masked.view(), dout.view(), mask.view(), 0.0f);
  dropout_bwd(d_empty.view(), dout.view(), none, 0.0f);
  EXPECT_EQ(std::memcmp(d_masked.f32(), d_empty.f32(), n * 4), 0) << "dropout_bwd";
  dropout_mask(none, 0.0f, rng, 0);  // nothing to draw
  EXPECT_THROW(dropout_fwd(out_empty.view(), none, inp.view(), 0.1f, rng, 0), Error);
  EXPECT_THROW(dropout_add_fwd(out_empty.view(), none, inp.view(), res.view(), 0.1f, rng, 0), Error);
  EXPECT_THROW(dropout_bwd(d_empty.view(), dout.view(), none, 0.1f), Error);
  EXPECT_THROW(dropout_mask(none, 0.1f, rng, 0), Error);
}

TEST(Dropout, BackwardMatchesReferenceAndFiniteDifferences) {
  const int64_t n = 7 * 37;
  const float p = 0.4f;
  const RngStream rng{5, 6};
  HostTensor inp = randn({7, 37}, 201), out = zeros({7, 37}), mask = zeros({7, 37}, DType::u8);
  HostTensor w = randn({7, 37}, 202), dinp = randn({7, 37}, 203);
  dropout_fwd(out.view(), mask.view(), inp.view(), p, rng, 3);
  const std::vector<double> dinp0 = to_double(dinp);
  dropout_bwd(dinp.view(), w.view(), mask.view(), p);
  std::vector<double> ref(dinp0);
  for (int64_t i = 0; i < n; ++i) ref[i] += mask.u8()[i] ? w.f32()[i] / (1.0 - p) : 0.0;
  expect_close(dinp.f32(), ref, 1e-6, 1e-6, "dropout dinp");
  auto loss = [&] {
    dropout_fwd(out.view(), mask.view(), inp.view(), p, rng, 3);
    return weighted_sum(out.f32(), w.f32(), n);
  };
  expect_close(dinp.f32(), plus(dinp0, finite_difference(inp, loss)), 1e-4, 1e-4,
               "dropout dinp vs finite differences");
}

// out = residual + dropout(inp) with the same mask as dropout_fwd; also in place (out = residual).
TEST(Dropout, AddMatchesResidualPlusDropout) {
  const int64_t n = 1001;
  const float p = 0.2f;
  const RngStream rng{11, 12};
  HostTensor inp = randn({n}, 211), residual = randn({n}, 212);
  HostTensor out = zeros({n}), mask = zeros({n}, DType::u8), plain = zeros({n}), plain_mask = zeros({n}, DType::u8);
  dropout_add_fwd(out.view(), mask.view(), inp.view(), residual.view(), p, rng, 9);
  dropout_fwd(plain.view(), plain_mask.view(), inp.view(), p, rng, 9);
  EXPECT_EQ(0, std::memcmp(mask.u8(), plain_mask.u8(), static_cast<size_t>(n)));
  std::vector<double> ref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ref[i] = static_cast<double>(residual.f32()[i]) + plain.f32()[i];
  // One f32 add of O(1) values: 1e-6 relative.
  expect_close(out.f32(), ref, 1e-7, 1e-6, "dropout_add out");
  HostTensor inplace = residual;
  dropout_add_fwd(inplace.view(), mask.view(), inp.view(), inplace.view(), p, rng, 9);
  EXPECT_EQ(0, std::memcmp(inplace.f32(), out.f32(), static_cast<size_t>(n) * 4));
}

TEST(Dropout, BadArgumentsThrow) {
  HostTensor inp = randn({4, 5}, 1), out = zeros({4, 5}), mask = zeros({4, 5}, DType::u8);
  HostTensor f32_mask = zeros({4, 5}), bad_out = zeros({4, 6});
  const RngStream rng{1, 2};
  EXPECT_THROW(dropout_fwd(out.view(), mask.view(), inp.view(), 1.0f, rng, 0), Error);
  EXPECT_THROW(dropout_fwd(out.view(), mask.view(), inp.view(), -0.1f, rng, 0), Error);
  EXPECT_THROW(dropout_fwd(out.view(), mask.view(), inp.view(), NAN, rng, 0), Error);
  EXPECT_THROW(dropout_fwd(out.view(), f32_mask.view(), inp.view(), 0.1f, rng, 0), Error);
  EXPECT_THROW(dropout_fwd(bad_out.view(), mask.view(), inp.view(), 0.1f, rng, 0), Error);
  EXPECT_THROW(dropout_bwd(bad_out.view(), out.view(), mask.view(), 0.1f), Error);
  EXPECT_THROW(dropout_add_fwd(out.view(), mask.view(), inp.view(), bad_out.view(), 0.1f, rng, 0), Error);
}

}  // namespace
}  // namespace mt::test
