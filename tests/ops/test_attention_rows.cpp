// Tests the context-parallel side of ops/attention.h: queries and keys away from positions
// 0 .. s − 1 (AttentionOptions's q_rows, k_rows, seq_length) and attention_merge. Every case is
// checked against the whole sequence's attention: a shard's queries over all keys, and the ring's
// key blocks merged by log-sum-exp, must give the whole attention's rows and gradients, dropout on.
#include <cmath>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops/attention.h"
#include "seq_rows_testing.h"

namespace mt {
namespace {

using test::HostTensor;
using test::take_heads;
using test::take_lse;
using test::take_seq;
using test::randn;
using test::zeros;

int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

constexpr int64_t kB = 2, kN = 4, kG = 2, kD = 8;

// The load-balanced shard of rank r among cp: chunks r and 2cp − 1 − r of c positions each.
SeqRows shard_rows(int r, int cp, int64_t c) { return SeqRows::runs(r * c, c, (2 * cp - 1 - r) * c); }

// Adds a [b, heads, count, d] block into the rows `rows` of a [b, heads, S, d] tensor (f64).
void scatter_add(std::vector<double>& full, int64_t s, HostTensor& block, const SeqRows& rows) {
  const int64_t bh = block.shape[0] * block.shape[1], count = block.shape[2], d = block.shape[3];
  for (int64_t jh = 0; jh < bh; ++jh)
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < d; ++c)
        full[(jh * s + rows.position(i)) * d + c] += block.f32()[(jh * count + i) * d + c];
}

std::vector<double> to_double(const HostTensor& t) {
  HostTensor copy = t;
  return test::to_double(copy);
}

// The whole sequence: inputs, output, lse, and the gradients for an upstream gradient `dout`.
struct Whole {
  int64_t s;
  AttentionOptions opt;
  HostTensor q, k, v, dout, out, lse, dq, dk, dv;
  explicit Whole(int64_t seq, float dropout)
      : s(seq), q(randn({kB, kN, seq, kD}, 1)), k(randn({kB, kG, seq, kD}, 2)), v(randn({kB, kG, seq, kD}, 3)),
        dout(randn({seq, kB, kN * kD}, 4)), out(zeros({seq, kB, kN * kD})), lse(zeros({kB, kN, seq})),
        dq(zeros(q.shape)), dk(zeros(k.shape)), dv(zeros(v.shape)) {
    opt.scale = 0.7f;
    opt.dropout_p = dropout;
    opt.rng = RngStream{77, 5};
    opt.head_offset = 4;
    opt.total_heads = 12;
    opt.first_sample = 3;
    attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), opt);
    HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(kB, kN, seq, kD, threads()))});
    attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), out.view(), lse.view(), q.view(), k.view(), v.view(),
                  opt, ws.view());
  }
  // The options of a shard's call: the same heads and dropout, positions given.
  AttentionOptions shard_options(const SeqRows& q_rows, const SeqRows& k_rows) const {
    AttentionOptions o = opt;
    o.q_rows = q_rows;
    o.k_rows = k_rows;
    o.seq_length = s;
    return o;
  }
};

struct CpCase {
  int cp;
  int64_t chunk;
  float dropout;
};
void PrintTo(const CpCase& c, std::ostream* os) {
  *os << "cp " << c.cp << ", chunk " << c.chunk << ", dropout " << c.dropout;
}

class ShardedAttention : public ::testing::TestWithParam<CpCase> {};

// A shard's two chunks of queries over every key: the whole attention's rows, and the backward
// (with the whole out and lse rows) gives the whole dq rows; the shards' dk, dv sum to the whole's.
TEST_P(ShardedAttention, QueriesOfAShardOverAllKeysMatchTheWholeRows) {
  const CpCase c = GetParam();
  const int64_t s = 2 * c.cp * c.chunk, sl = 2 * c.chunk;
  Whole whole(s, c.dropout);
  std::vector<double> dk_sum(whole.dk.numel(), 0.0), dv_sum(whole.dv.numel(), 0.0);
  for (int r = 0; r < c.cp; ++r) {
    const SeqRows rows = shard_rows(r, c.cp, c.chunk);
    const AttentionOptions o = whole.shard_options(rows, SeqRows{});
    HostTensor q = take_heads(whole.q, rows, sl);
    HostTensor out = zeros({sl, kB, kN * kD}), lse = zeros({kB, kN, sl});
    attention_fwd(out.view(), lse.view(), q.view(), whole.k.view(), whole.v.view(), o);
    test::expect_close(out.f32(), to_double(take_seq(whole.out, rows, sl)), 1e-6, 1e-5, "out");
    test::expect_close(lse.f32(), take_lse(whole.lse, rows, sl), 1e-6, 1e-5, "lse");

    HostTensor dout = take_seq(whole.dout, rows, sl);
    HostTensor dq = zeros(q.shape), dk = zeros(whole.k.shape), dv = zeros(whole.v.shape);
    HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(kB, kN, s, kD, threads()))});
    attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), out.view(), lse.view(), q.view(), whole.k.view(),
                  whole.v.view(), o, ws.view());
    test::expect_close(dq.f32(), to_double(take_heads(whole.dq, rows, sl)), 1e-5, 1e-4, "dq");
    for (int64_t e = 0; e < dk.numel(); ++e) {
      dk_sum[e] += dk.f32()[e];
      dv_sum[e] += dv.f32()[e];
    }
  }
  test::expect_close(whole.dk.f32(), dk_sum, 1e-5, 1e-4, "dk summed over shards");
  test::expect_close(whole.dv.f32(), dv_sum, 1e-5, 1e-4, "dv summed over shards");
}

// The ring: each shard's queries against each shard's keys in turn, merged by log-sum-exp, give
// the whole attention; each block's backward with the merged out and lse gives its share of dq and
// the block's dk, dv, which sum to the whole gradients.
TEST_P(ShardedAttention, KeyBlocksMergedByLogSumExpMatchTheWhole) {
  const CpCase c = GetParam();
  const int64_t s = 2 * c.cp * c.chunk, sl = 2 * c.chunk;
  Whole whole(s, c.dropout);
  std::vector<double> dk_sum(whole.dk.numel(), 0.0), dv_sum(whole.dv.numel(), 0.0);
  HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(kB, kN, sl, kD, threads()))});
  for (int r = 0; r < c.cp; ++r) {
    const SeqRows rows = shard_rows(r, c.cp, c.chunk);
    HostTensor q = take_heads(whole.q, rows, sl);
    HostTensor out = zeros({sl, kB, kN * kD}), lse = zeros({kB, kN, sl});
    for (int64_t e = 0; e < lse.numel(); ++e) lse.f32()[e] = -std::numeric_limits<float>::infinity();
    for (int src = 0; src < c.cp; ++src) {
      const SeqRows key_rows = shard_rows(src, c.cp, c.chunk);
      HostTensor k = take_heads(whole.k, key_rows, sl), v = take_heads(whole.v, key_rows, sl);
      HostTensor part = zeros(out.shape), part_lse = zeros(lse.shape);
      attention_fwd(part.view(), part_lse.view(), q.view(), k.view(), v.view(), whole.shard_options(rows, key_rows));
      attention_merge(out.view(), lse.view(), part.view(), part_lse.view());
    }
    test::expect_close(out.f32(), to_double(take_seq(whole.out, rows, sl)), 1e-6, 1e-5, "merged out");
    test::expect_close(lse.f32(), take_lse(whole.lse, rows, sl), 1e-6, 1e-5, "merged lse");

    HostTensor dout = take_seq(whole.dout, rows, sl), dq = zeros(q.shape);
    for (int src = 0; src < c.cp; ++src) {
      const SeqRows key_rows = shard_rows(src, c.cp, c.chunk);
      HostTensor k = take_heads(whole.k, key_rows, sl), v = take_heads(whole.v, key_rows, sl);
      HostTensor dk = zeros(k.shape), dv = zeros(v.shape);
      attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), out.view(), lse.view(), q.view(), k.view(), v.view(),
                    whole.shard_options(rows, key_rows), ws.view());
      scatter_add(dk_sum, s, dk, key_rows);
      scatter_add(dv_sum, s, dv, key_rows);
    }
    test::expect_close(dq.f32(), to_double(take_heads(whole.dq, rows, sl)), 1e-5, 1e-4, "dq over blocks");
  }
  test::expect_close(whole.dk.f32(), dk_sum, 1e-5, 1e-4, "dk over blocks");
  test::expect_close(whole.dv.f32(), dv_sum, 1e-5, 1e-4, "dv over blocks");
}

// Chunks of 40 rows put a chunk boundary inside the kernels' 64-row tiles; 3 ranks exercise the
// middle shards' two-sided blocks.
INSTANTIATE_TEST_SUITE_P(Layouts, ShardedAttention,
                         ::testing::Values(CpCase{2, 40, 0.0f}, CpCase{2, 40, 0.25f}, CpCase{3, 20, 0.25f},
                                           CpCase{4, 7, 0.1f}));

// Queries that see no key (all keys later) get out 0 and lse −inf, and their backward adds nothing.
TEST(AttentionRows, QueriesBeforeEveryKeySeeNothing) {
  const int64_t sq = 8, sk = 8;
  HostTensor q = randn({1, 2, sq, kD}, 1), k = randn({1, 1, sk, kD}, 2), v = randn({1, 1, sk, kD}, 3);
  AttentionOptions o;
  o.scale = 0.5f;
  o.k_rows = SeqRows::run(sq);
  o.seq_length = sq + sk;
  HostTensor out = randn({sq, 1, 2 * kD}, 4), lse = zeros({1, 2, sq});
  attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), o);
  for (int64_t e = 0; e < out.numel(); ++e) ASSERT_EQ(out.f32()[e], 0.0f) << e;
  for (int64_t e = 0; e < lse.numel(); ++e) ASSERT_EQ(lse.f32()[e], -std::numeric_limits<float>::infinity()) << e;
  HostTensor dq = zeros(q.shape), dk = zeros(k.shape), dv = zeros(v.shape), dout = randn(out.shape, 5);
  HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(1, 2, sk, kD, threads()))});
  attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), out.view(), lse.view(), q.view(), k.view(), v.view(), o,
                ws.view());
  for (HostTensor* g : {&dq, &dk, &dv})
    for (int64_t e = 0; e < g->numel(); ++e) ASSERT_EQ(g->f32()[e], 0.0f) << e;
}

// attention_merge against the formula in f64, including rows where one side or both saw nothing.
TEST(AttentionMerge, MatchesTheLogSumExpFormula) {
  const int64_t b = 2, n = 3, s = 5, d = 4;
  HostTensor out = randn({s, b, n * d}, 1), part = randn({s, b, n * d}, 2);
  HostTensor lse = randn({b, n, s}, 3, 2.0f), part_lse = randn({b, n, s}, 4, 2.0f);
  const float inf = std::numeric_limits<float>::infinity();
  lse.f32()[1] = -inf;       // only the part saw keys
  part_lse.f32()[2] = -inf;  // only the accumulated side did
  lse.f32()[3] = part_lse.f32()[3] = -inf;
  for (int64_t e = 0; e < d; ++e) out.f32()[3 * b * n * d + e] = part.f32()[3 * b * n * d + e] = 0.0f;  // (j 0, h 0, i 3)
  std::vector<double> want_out(out.numel()), want_lse(lse.numel());
  for (int64_t j = 0; j < b; ++j)
    for (int64_t h = 0; h < n; ++h)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t row = (j * n + h) * s + i;
        const double a = lse.f32()[row], p = part_lse.f32()[row];
        const double c = std::max(a, p) == -INFINITY ? -INFINITY : std::log(std::exp(a) + std::exp(p));
        want_lse[row] = c;
        for (int64_t e = 0; e < d; ++e) {
          const int64_t at = (i * b + j) * n * d + h * d + e;
          want_out[at] = c == -INFINITY ? 0.0 : out.f32()[at] * std::exp(a - c) + part.f32()[at] * std::exp(p - c);
        }
      }
  attention_merge(out.view(), lse.view(), part.view(), part_lse.view());
  test::expect_close(out.f32(), want_out, 1e-6, 1e-6, "out");
  test::expect_close(lse.f32(), want_lse, 1e-6, 1e-6, "lse");
}

TEST(AttentionRows, RejectsBadRowsAndShiftedDocumentsOrProbs) {
  HostTensor q = randn({1, 2, 8, kD}, 1), k = randn({1, 1, 8, kD}, 2), v = randn({1, 1, 8, kD}, 3);
  HostTensor out = zeros({8, 1, 2 * kD}), lse = zeros({1, 2, 8});
  AttentionOptions o;
  o.seq_length = 16;
  o.q_rows = SeqRows::runs(4, 4, 6);  // the second run starts inside the first
  test::expect_error_mentioning([&] { attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), o); },
                                "increasing positions");
  o.q_rows = SeqRows::runs(0, 4, 14);  // reaches position 17 of 16
  test::expect_error_mentioning([&] { attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), o); },
                                "beyond the sequence's 16");
  o.q_rows = SeqRows::run(8);
  HostTensor starts = zeros({1, 8}, DType::i32);
  o.key_start = starts.view();
  test::expect_error_mentioning([&] { attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), o); },
                                "document masks");
  o.key_start = TensorView();
  HostTensor probs = zeros({1, 2, 8, 8});
  test::expect_error_mentioning(
      [&] { attention_probs_fwd(out.view(), probs.view(), TensorView(), q.view(), k.view(), v.view(), o); },
      "flash path");
}

}  // namespace
}  // namespace mt
