// Tests parallel/context_parallel.h: each comm type's attention over the world's ranks as the cp
// group against the whole sequence's attention on one rank (outputs, lse and every gradient, GQA,
// dropout with tensor-parallel head indexing), and its refusals.
#include "parallel/context_parallel.h"

#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "parallel_testing.h"
#include "seq_rows_testing.h"

namespace mt {
namespace {

using test::HostTensor;
using test::take_heads;
using test::take_lse;
using test::take_seq;
using test::randn;
using test::zeros;

constexpr int64_t kB = 2, kN = 8, kG = 4, kD = 6, kChunk = 5;

struct Whole {
  int64_t s;
  AttentionOptions opt;
  HostTensor q, k, v, dout, out, lse, dq, dk, dv;
  Whole(int64_t seq, float dropout)
      : s(seq), q(randn({kB, kN, seq, kD}, 1)), k(randn({kB, kG, seq, kD}, 2)), v(randn({kB, kG, seq, kD}, 3)),
        dout(randn({seq, kB, kN * kD}, 4)), out(zeros({seq, kB, kN * kD})), lse(zeros({kB, kN, seq})),
        dq(zeros(q.shape)), dk(zeros(k.shape)), dv(zeros(v.shape)) {
    opt.scale = 0.6f;
    opt.dropout_p = dropout;
    opt.rng = RngStream{91, 4};
    opt.head_offset = kN;  // as if the second of three tensor-parallel ranks
    opt.total_heads = 3 * kN;
    opt.first_sample = 7;
    attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), opt);
    HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(kB, kN, seq, kD, 1))});
    attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), out.view(), lse.view(), q.view(), k.view(), v.view(),
                  opt, ws.view());
  }
};

struct Case {
  CpCommType type;
  float dropout;
};

class CpAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CpAttention, MatchesTheWholeSequenceOnOneRank) {
  const Case c = GetParam();
  Communicator& world = test::world();
  const int cp = world.size();
  if (c.type == CpCommType::a2a && (kN % cp || kG % cp)) GTEST_SKIP() << "a2a needs heads divisible by " << cp;
  const ContextParallel ctx{&world, c.type};
  const int64_t sl = 2 * kChunk, s = sl * cp;
  Whole whole(s, c.dropout);
  const SeqRows rows = ctx.rows(sl);

  HostTensor q = take_heads(whole.q, rows, sl), k = take_heads(whole.k, rows, sl), v = take_heads(whole.v, rows, sl);
  HostTensor out = zeros({sl, kB, kN * kD}), lse = zeros({kB, kN, sl});
  HostTensor scratch = zeros({static_cast<int64_t>(cp_attention_scratch_floats(c.type, cp, kB, kN, kG, sl, kD, 1))});
  cp_attention_fwd(ctx, out.view(), lse.view(), q.view(), k.view(), v.view(), whole.opt, scratch.view());
  HostTensor want_out = take_seq(whole.out, rows, sl);
  test::expect_close(out, want_out, 1e-6, 1e-5, "out");
  if (c.type == CpCommType::a2a) {  // lse of head block `rank`, every position
    const int64_t np = kN / cp;
    std::vector<double> want(static_cast<size_t>(kB * np * s));
    for (int64_t j = 0; j < kB; ++j)
      for (int64_t h = 0; h < np; ++h)
        for (int64_t i = 0; i < s; ++i)
          want[(j * np + h) * s + i] = whole.lse.f32()[(j * kN + world.rank() * np + h) * s + i];
    test::expect_close(lse.f32(), want, 1e-6, 1e-5, "lse (head block)");
  } else {
    test::expect_close(lse.f32(), take_lse(whole.lse, rows, sl), 1e-6, 1e-5, "lse");
  }

  // Gradients accumulate onto what is there.
  HostTensor dq = randn(q.shape, 11), dk = randn(k.shape, 12), dv = randn(v.shape, 13);
  const std::vector<double> dq0 = test::to_double(dq), dk0 = test::to_double(dk), dv0 = test::to_double(dv);
  HostTensor dout = take_seq(whole.dout, rows, sl);
  cp_attention_bwd(ctx, dq.view(), dk.view(), dv.view(), dout.view(), out.view(), lse.view(), q.view(), k.view(),
                   v.view(), whole.opt, scratch.view());
  for (auto [got, start, full, name] : {std::tuple{&dq, &dq0, &whole.dq, "dq"}, std::tuple{&dk, &dk0, &whole.dk, "dk"},
                                        std::tuple{&dv, &dv0, &whole.dv, "dv"}}) {
    HostTensor rows_of_full = take_heads(*full, rows, sl);
    std::vector<double> want = test::to_double(rows_of_full);
    for (size_t e = 0; e < want.size(); ++e) want[e] += (*start)[e];
    test::expect_close(got->f32(), want, 1e-5, 1e-4, name);
  }
}

std::string name_of(const ::testing::TestParamInfo<Case>& info) {
  return std::string(cp_comm_type_name(info.param.type)) + (info.param.dropout > 0 ? "_dropout" : "");
}

INSTANTIATE_TEST_SUITE_P(CommTypes, CpAttention,
                         ::testing::Values(Case{CpCommType::p2p, 0.0f}, Case{CpCommType::p2p, 0.2f},
                                           Case{CpCommType::a2a, 0.2f}, Case{CpCommType::allgather, 0.2f}),
                         name_of);

TEST(CpAttentionChecks, RefusesOddRowsAndIndivisibleHeads) {
  const int cp = test::world().size();
  test::expect_error_mentioning([&] { check_cp_attention(CpCommType::p2p, cp, kN, kG, 7); },
                                "divisible by 2 x --context-parallel-size");
  test::expect_error_mentioning([&] { check_cp_attention(CpCommType::a2a, cp, 3 * cp + 1, 1, 8); },
                                "--cp-comm-type a2a");
}

}  // namespace
}  // namespace mt
