// Device cases of ops/moe_experts.h against the CPU backend: the permuted row count, permute (rows,
// row_token, tokens_per_expert) and its backward, unpermute with and without routing weights and
// its backward with and without the weights' gradient, over routings with dropped tokens, unused
// experts, padding slots, one expert, one token; permute's backward also over row_token orders no
// permute writes (random, and more runs than the CUDA index holds); and the expert MLP, grouped and
// sequential, GeLU (both forms) and SwiGLU, with empty and one-row experts.
#include <cstring>
#include <random>
#include <vector>

#include "device_testing.h"
#include "ops/moe_experts.h"

namespace mt::test {
namespace {

struct Spec {
  int64_t tokens, experts, topk, hidden;
  double drop = 0.0, pad = 0.0;
  int unused = -1;  // an expert nobody chooses
  uint32_t seed = 1;
};

struct Routing {
  HostTensor map, probs;  // u8 [T, E], f32 [T, E]
};

Routing make_routing(const Spec& s) {
  Routing r{zeros({s.tokens, s.experts}, DType::u8), zeros({s.tokens, s.experts})};
  std::mt19937 gen(s.seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int64_t t = 0; t < s.tokens; ++t) {
    std::vector<int> pool;
    for (int e = 0; e < s.experts; ++e)
      if (e != s.unused) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), gen);
    const bool dropped = u01(gen) < s.drop;
    for (int64_t j = 0; j < s.topk && j < static_cast<int64_t>(pool.size()); ++j) {
      if (dropped) continue;
      r.map.u8()[t * s.experts + pool[j]] = 1;
      r.probs.f32()[t * s.experts + pool[j]] = static_cast<float>(u01(gen));
    }
    for (int e : pool)
      if (!r.map.u8()[t * s.experts + e] && u01(gen) < s.pad) r.map.u8()[t * s.experts + e] = 1;
  }
  return r;
}

std::vector<Spec> specs() {
  return {
      {1, 1, 1, 5},
      {1, 4, 2, 33},
      {24, 6, 2, 16, 0.2, 0.0, 3},
      {37, 8, 3, 65, 0.1, 0.3},
      {300, 64, 8, 40, 0.05, 0.02, 17},
      {513, 16, 1, 257},
  };
}

TEST(DeviceMoeExperts, PermuteAndUnpermute) {
  for (const Spec& s : specs()) {
    SCOPED_TRACE(::testing::Message() << "T " << s.tokens << " E " << s.experts << " k " << s.topk << " h "
                                      << s.hidden);
    DeviceCase dev;
    Routing r = make_routing(s);
    HostTensor tokens = randn({s.tokens, s.hidden}, s.seed + 5);
    const TensorView dmap = dev.upload(r.map), dprobs = dev.upload(r.probs), dtokens = dev.upload(tokens);

    const int64_t rows = moe_permuted_rows(r.map.view());
    ASSERT_EQ(moe_permuted_rows(dmap), rows);
    HostTensor prow = zeros({rows, s.hidden}), row_token = zeros({rows}, DType::i32),
               counts = zeros({s.experts}, DType::i32);
    moe_permute_fwd(prow.view(), row_token.view(), counts.view(), tokens.view(), r.map.view());
    const TensorView dprow = dev.poisoned(DType::f32, {rows, s.hidden}),
                     drow_token = dev.poisoned(DType::i32, {rows}),
                     dcounts = dev.poisoned(DType::i32, {s.experts});
    moe_permute_fwd(dprow, drow_token, dcounts, dtokens, dmap);
    dev.expect_matches(dprow, prow, 0, 0, "moe_permute_fwd rows");
    dev.expect_matches(drow_token, row_token, 0, 0, "moe_permute_fwd row_token");
    dev.expect_matches(dcounts, counts, 0, 0, "moe_permute_fwd tokens_per_expert");

    // permute's backward: each token's rows added in row order, as the CPU adds them.
    HostTensor drows = randn({rows, s.hidden}, s.seed + 6), dtok = randn({s.tokens, s.hidden}, s.seed + 7);
    const TensorView ddtok = dev.upload(dtok);
    moe_permute_bwd(dtok.view(), drows.view(), row_token.view());
    moe_permute_bwd(ddtok, dev.upload(drows), drow_token);
    dev.expect_matches(ddtok, dtok, 0, 0, "moe_permute_bwd");

    // The experts' output stands in for rows; unpermute with and without weights.
    HostTensor expert_out = randn({rows, s.hidden}, s.seed + 8);
    const TensorView dexpert_out = dev.upload(expert_out);
    for (int weighted = 0; weighted < 2; ++weighted) {
      SCOPED_TRACE(weighted ? "weighted" : "unweighted");
      const TensorView hp = weighted ? r.probs.view() : TensorView(), dp = weighted ? dprobs : TensorView();
      HostTensor out = zeros({s.tokens, s.hidden});
      const TensorView dout = dev.poisoned(DType::f32, {s.tokens, s.hidden});
      moe_unpermute_fwd(out.view(), expert_out.view(), row_token.view(), counts.view(), hp);
      moe_unpermute_fwd(dout, dexpert_out, drow_token, dcounts, dp);
      // Each term one fused multiply-add on both sides: equal unless the CPU build lacks FMA.
      dev.expect_matches(dout, out, 1e-6, 1e-6, "moe_unpermute_fwd");

      for (int with_dprobs = 0; with_dprobs < 2; ++with_dprobs) {
        HostTensor gout = randn({s.tokens, s.hidden}, s.seed + 9), gx = randn({rows, s.hidden}, s.seed + 10),
                   gp = randn({s.tokens, s.experts}, s.seed + 11);
        const TensorView dgx = dev.upload(gx), dgp = with_dprobs ? dev.upload(gp) : TensorView();
        moe_unpermute_bwd(gx.view(), with_dprobs ? gp.view() : TensorView(), gout.view(), expert_out.view(),
                          row_token.view(), counts.view(), hp);
        moe_unpermute_bwd(dgx, dgp, dev.upload(gout), dexpert_out, drow_token, dcounts, dp);
        dev.expect_matches(dgx, gx, 1e-6, 1e-6, "moe_unpermute_bwd drows");
        // Σ_c in double in another order, rounded once: an ulp of the f32 result at most.
        if (with_dprobs) dev.expect_matches(dgp, gp, 1e-6, 1e-6, "moe_unpermute_bwd drouting_probs");
      }
    }
  }
}

// permute's backward is defined for any row_token: random (many short runs), and strictly
// decreasing over 14000 rows (every row its own run: more runs than the CUDA index holds, so the
// kernel scans every row instead).
TEST(DeviceMoeExperts, PermuteBwdAnyRowOrder) {
  for (int decreasing = 0; decreasing < 2; ++decreasing) {
    DeviceCase dev;
    const int64_t tokens = decreasing ? 7000 : 50, rows = decreasing ? 14000 : 3001, hidden = 9;
    HostTensor row_token = zeros({rows}, DType::i32);
    std::mt19937 gen(3);
    for (int64_t r = 0; r < rows; ++r)
      row_token.i32()[r] = static_cast<int32_t>(decreasing ? (rows - 1 - r) % tokens : gen() % tokens);
    HostTensor drows = randn({rows, hidden}, 21), dtok = randn({tokens, hidden}, 22);
    const TensorView ddtok = dev.upload(dtok);
    moe_permute_bwd(dtok.view(), drows.view(), row_token.view());
    moe_permute_bwd(ddtok, dev.upload(drows), dev.upload(row_token));
    dev.expect_matches(ddtok, dtok, 0, 0, decreasing ? "moe_permute_bwd, decreasing" : "moe_permute_bwd, random");
  }
}

// The expert MLP: on CUDA a loop over experts of the CUDA linear (cuBLASLt) and activation entry
// points; checked grouped and sequential, with an empty and a one-row expert, dinp given or not.
TEST(DeviceMoeExperts, ExpertMlp) {
  const int64_t hidden = 24, ffn = 40, experts = 4;
  const int32_t count_values[experts] = {5, 0, 1, 37};
  const int64_t rows = 43;
  struct Act {
    MoeExpertActivation activation;
    PointwiseActivation form;
  };
  for (Act act : {Act{MoeExpertActivation::pointwise, PointwiseActivation::gelu}, Act{MoeExpertActivation::pointwise, PointwiseActivation::gelu_tanh},
                  Act{MoeExpertActivation::swiglu, PointwiseActivation::gelu}})
    for (MoeExpertsImpl impl : {MoeExpertsImpl::grouped, MoeExpertsImpl::sequential}) {
      SCOPED_TRACE(::testing::Message() << "swiglu " << (act.activation == MoeExpertActivation::swiglu) << " tanh "
                                        << (act.form == PointwiseActivation::gelu_tanh) << " grouped "
                                        << (impl == MoeExpertsImpl::grouped));
      DeviceCase dev;
      MoeExpertsOptions o;
      o.activation = act.activation;
      o.pointwise = act.form;
      o.impl = impl;
      const int64_t f1 = act.activation == MoeExpertActivation::swiglu ? 2 * ffn : ffn;
      HostTensor counts = zeros({experts}, DType::i32);
      for (int64_t e = 0; e < experts; ++e) counts.i32()[e] = count_values[e];
      HostTensor inp = randn({rows, hidden}, 70), w1 = randn({experts, f1, hidden}, 71, 0.2f),
                 w2 = randn({experts, hidden, ffn}, 72, 0.2f);
      const TensorView dinp_in = dev.upload(inp), dw1 = dev.upload(w1), dw2 = dev.upload(w2);
      HostTensor out = zeros({rows, hidden}), pre = zeros({rows, f1}), a = zeros({rows, ffn});
      const TensorView dout = dev.poisoned(DType::f32, {rows, hidden}), dpre = dev.poisoned(DType::f32, {rows, f1}),
                       da = dev.poisoned(DType::f32, {rows, ffn});
      moe_experts_fwd(out.view(), pre.view(), a.view(), inp.view(), counts.view(), w1.view(), w2.view(), o);
      moe_experts_fwd(dout, dpre, da, dinp_in, counts.view(), dw1, dw2, o);
      // f32 GEMMs whose summation order is the library's: a few ulps of the dot products.
      dev.expect_matches(dpre, pre, 1e-4, 1e-4, "moe_experts_fwd pre_act");
      dev.expect_matches(dout, out, 1e-4, 1e-4, "moe_experts_fwd out");

      for (int with_dinp = 0; with_dinp < 2; ++with_dinp) {
        HostTensor gout = randn({rows, hidden}, 73), gin = randn({rows, hidden}, 74),
                   gw1 = randn({experts, f1, hidden}, 75), gw2 = randn({experts, hidden, ffn}, 76);
        HostTensor s_act = zeros({rows, ffn}), s_dact = zeros({rows, ffn}), s_dpre = zeros({rows, f1});
        const TensorView dgin = with_dinp ? dev.upload(gin) : TensorView(), dgw1 = dev.upload(gw1),
                         dgw2 = dev.upload(gw2);
        moe_experts_bwd(with_dinp ? gin.view() : TensorView(), gw1.view(), gw2.view(), gout.view(), inp.view(),
                        pre.view(), counts.view(), w1.view(), w2.view(), s_act.view(), s_dact.view(), s_dpre.view(),
                        o);
        moe_experts_bwd(dgin, dgw1, dgw2, dev.upload(gout), dinp_in, dev.upload(pre), counts.view(), dw1, dw2,
                        dev.poisoned(DType::f32, {rows, ffn}), dev.poisoned(DType::f32, {rows, ffn}),
                        dev.poisoned(DType::f32, {rows, f1}), o);
        if (with_dinp) dev.expect_matches(dgin, gin, 1e-4, 1e-4, "moe_experts_bwd dinp");
        dev.expect_matches(dgw1, gw1, 1e-4, 1e-4, "moe_experts_bwd dweight1");
        dev.expect_matches(dgw2, gw2, 1e-4, 1e-4, "moe_experts_bwd dweight2");
      }
    }
}

}  // namespace
}  // namespace mt::test
