// Device cases of ops/moe_router.h against the CPU backend: routing forward and backward for every
// score function (softmax post and pre, sigmoid with and without expert bias), group-limited top-k
// and the scaling factor, k = 1..8, E not a multiple of 32; the routing map dropless, with capacity
// under both drop policies (ties included), with and without padding, and with a capacity above
// the token count; its backward and the tokens-per-expert counts; the load-balancing scores (both
// score functions, one and several sequences) and their backward; the aux loss and the z-loss
// forward and backward; Sinkhorn's normalisation and the routing it steers; and the expert-bias
// update.
#include <vector>

#include "device_testing.h"
#include "ops/moe_router.h"

namespace mt::test {
namespace {

// Router math is in double, rounded once to f32; CUDA's exp/log differ from glibc's by an ulp of
// a double, which can move the f32 rounding by one ulp.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

struct RouterCase {
  int64_t experts, topk;
  MoeScoreFunction f;
  bool pre = false, bias = false;
  int64_t groups = 0, group_topk = 0;
  float scaling = 0.0f;
};

std::vector<RouterCase> router_cases() {
  using F = MoeScoreFunction;
  return {
      {8, 2, F::softmax},
      {40, 4, F::softmax, false, false, 0, 0, 2.5f},
      {8, 1, F::softmax, true},
      {64, 2, F::softmax, true},
      {8, 1, F::sigmoid},
      {40, 4, F::sigmoid, false, true},
      {64, 8, F::sigmoid, false, true, 8, 4, 2.5f},  // DeepSeek-V3's shape of routing, scaled down
      {160, 4, F::softmax, false, false, 4, 2},
      {160, 6, F::softmax, true, false, 4, 2},
  };
}

TEST(DeviceMoeRouter, RouterFwdBwd) {
  for (const RouterCase& c : router_cases())
    for (int64_t tokens : {int64_t{1}, int64_t{67}, int64_t{300}}) {
      SCOPED_TRACE(::testing::Message() << "E " << c.experts << " k " << c.topk << " sigmoid "
                                        << (c.f == MoeScoreFunction::sigmoid) << " pre " << c.pre << " bias "
                                        << c.bias << " groups " << c.groups << " T " << tokens);
      DeviceCase dev;
      MoeRouterOptions o;
      o.topk = c.topk;
      o.score_function = c.f;
      o.pre_softmax = c.pre;
      o.num_groups = c.groups;
      o.group_topk = c.group_topk;
      o.scaling_factor = c.scaling;
      HostTensor logits = randn({tokens, c.experts}, 30 + tokens, 2.0f), bias = randn({c.experts}, 31, 0.1f);
      const TensorView dlogits_in = dev.upload(logits), dbias = c.bias ? dev.upload(bias) : TensorView();
      HostTensor probs = zeros({tokens, c.topk}), indices = zeros({tokens, c.topk}, DType::i32);
      const TensorView dprobs = dev.poisoned(DType::f32, {tokens, c.topk}),
                       dindices = dev.poisoned(DType::i32, {tokens, c.topk});
      moe_router_fwd(probs.view(), indices.view(), logits.view(), c.bias ? bias.view() : TensorView(), TensorView(), o);
      moe_router_fwd(dprobs, dindices, dlogits_in, dbias, TensorView(), o);
      dev.expect_matches(dindices, indices, 0, 0, "moe_router_fwd indices");
      dev.expect_matches(dprobs, probs, kAtol, kRtol, "moe_router_fwd probs");

      HostTensor grad = randn({tokens, c.topk}, 32), dx = randn({tokens, c.experts}, 33);
      const TensorView ddx = dev.upload(dx);
      moe_router_bwd(dx.view(), grad.view(), logits.view(), indices.view(), o);
      moe_router_bwd(ddx, dev.upload(grad), dlogits_in, dev.upload(indices), o);
      dev.expect_matches(ddx, dx, kAtol, kRtol, "moe_router_bwd");
    }
}

TEST(DeviceMoeRouter, RoutingMapCapacityAndCounts) {
  const int64_t tokens = 67, experts = 8;
  for (int64_t topk : {int64_t{1}, int64_t{2}}) {
    DeviceCase dev;
    MoeRouterOptions o;
    o.topk = topk;
    o.score_function = MoeScoreFunction::sigmoid;
    HostTensor logits = randn({tokens, experts}, 40 + topk, 2.0f);
    HostTensor probs = zeros({tokens, topk}), indices = zeros({tokens, topk}, DType::i32);
    moe_router_fwd(probs.view(), indices.view(), logits.view(), TensorView(), TensorView(), o);
    // Ties in the probs policy's ranking: some weights repeated exactly, one zero.
    for (int64_t i = 0; i < tokens * topk; i += 5) probs.f32()[i] = 0.5f;
    probs.f32()[3] = 0.0f;
    const TensorView dprobs = dev.upload(probs), dindices = dev.upload(indices);
    const std::optional<double> factors[] = {std::nullopt, 1.0, 0.5, 0.01, 5.0};  // 5: capacity > T
    for (const std::optional<double>& factor : factors)
      for (MoeDropPolicy policy : {MoeDropPolicy::probs, MoeDropPolicy::position})
        for (bool pad : {false, true}) {
          if (!factor && pad) continue;  // padding needs a capacity
          SCOPED_TRACE(::testing::Message() << "k " << topk << " factor " << (factor ? *factor : -1.0) << " position "
                                            << (policy == MoeDropPolicy::position) << " pad " << pad);
          MoeCapacityOptions cap;
          cap.capacity_factor = factor;
          cap.drop_policy = policy;
          cap.pad_to_capacity = pad;
          HostTensor rp = zeros({tokens, experts}), map = zeros({tokens, experts}, DType::u8);
          const TensorView drp = dev.poisoned(DType::f32, {tokens, experts}),
                           dmap = dev.poisoned(DType::u8, {tokens, experts});
          moe_routing_map_fwd(rp.view(), map.view(), probs.view(), indices.view(), cap);
          moe_routing_map_fwd(drp, dmap, dprobs, dindices, cap);
          dev.expect_matches(dmap, map, 0, 0, "moe_routing_map_fwd routing_map");
          dev.expect_matches(drp, rp, 0, 0, "moe_routing_map_fwd routing_probs");

          HostTensor grad = randn({tokens, experts}, 41), dp = randn({tokens, topk}, 42);
          const TensorView ddp = dev.upload(dp);
          moe_routing_map_bwd(dp.view(), grad.view(), map.view(), indices.view());
          moe_routing_map_bwd(ddp, dev.upload(grad), dmap, dindices);
          dev.expect_matches(ddp, dp, 0, 0, "moe_routing_map_bwd");

          HostTensor counts = randn({experts}, 43);
          const TensorView dcounts = dev.upload(counts);
          moe_tokens_per_expert(counts.view(), map.view());
          moe_tokens_per_expert(dcounts, dmap);
          dev.expect_matches(dcounts, counts, 0, 0, "moe_tokens_per_expert");
        }
  }
}

TEST(DeviceMoeRouter, AuxScoresAndLosses) {
  const int64_t tokens = 66;
  for (int64_t experts : {int64_t{8}, int64_t{37}})
    for (MoeScoreFunction f : {MoeScoreFunction::softmax, MoeScoreFunction::sigmoid})
      for (int64_t seqs : {int64_t{1}, int64_t{6}}) {
        SCOPED_TRACE(::testing::Message() << "E " << experts << " sigmoid " << (f == MoeScoreFunction::sigmoid)
                                          << " B " << seqs);
        DeviceCase dev;
        const int64_t topk = 3;
        HostTensor logits = randn({tokens, experts}, 50 + experts, 2.0f);
        const TensorView dlogits = dev.upload(logits);
        HostTensor scores = zeros({tokens, experts}), counts = zeros({seqs, experts});
        const TensorView dscores = dev.poisoned(DType::f32, {tokens, experts}),
                         dcounts = dev.poisoned(DType::f32, {seqs, experts});
        moe_aux_scores_fwd(scores.view(), counts.view(), logits.view(), topk, f);
        moe_aux_scores_fwd(dscores, dcounts, dlogits, topk, f);
        dev.expect_matches(dscores, scores, kAtol, kRtol, "moe_aux_scores_fwd scores");
        dev.expect_matches(dcounts, counts, 0, 0, "moe_aux_scores_fwd counts");

        HostTensor ds = randn({tokens, experts}, 51), dx = randn({tokens, experts}, 52);
        const TensorView ddx = dev.upload(dx);
        moe_aux_scores_bwd(dx.view(), ds.view(), logits.view(), f);
        moe_aux_scores_bwd(ddx, dev.upload(ds), dlogits, f);
        dev.expect_matches(ddx, dx, kAtol, kRtol, "moe_aux_scores_bwd");

        // The losses from the CPU's scores and counts on both sides (same inputs).
        const TensorView ds_in = dev.upload(scores), dc_in = dev.upload(counts);
        HostTensor loss = zeros({1});
        const TensorView dloss = dev.poisoned(DType::f32, {1});
        moe_aux_loss_fwd(loss.view(), scores.view(), counts.view(), tokens * 4 / seqs, topk, 0.01);
        moe_aux_loss_fwd(dloss, ds_in, dc_in, tokens * 4 / seqs, topk, 0.01);
        dev.expect_matches(dloss, loss, 0, 1e-6, "moe_aux_loss_fwd");  // a double sum in another order
        HostTensor g = randn({tokens, experts}, 53);
        const TensorView dg = dev.upload(g);
        moe_aux_loss_bwd(g.view(), 0.7f, counts.view(), tokens * 4 / seqs, topk, 0.01);
        moe_aux_loss_bwd(dg, 0.7f, dc_in, tokens * 4 / seqs, topk, 0.01);
        dev.expect_matches(dg, g, kAtol, kRtol, "moe_aux_loss_bwd");

        HostTensor zloss = zeros({1});
        const TensorView dzloss = dev.poisoned(DType::f32, {1});
        moe_z_loss_fwd(zloss.view(), logits.view(), 1e-3);
        moe_z_loss_fwd(dzloss, dlogits, 1e-3);
        dev.expect_matches(dzloss, zloss, 0, 1e-6, "moe_z_loss_fwd");
        HostTensor zx = randn({tokens, experts}, 54);
        const TensorView dzx = dev.upload(zx);
        moe_z_loss_bwd(zx.view(), 0.9f, logits.view(), 1e-3);
        moe_z_loss_bwd(dzx, 0.9f, dlogits, 1e-3);
        dev.expect_matches(dzx, zx, kAtol, kRtol, "moe_z_loss_bwd");
      }
}

// Sinkhorn's normalisation (T up to 300, E up to the 1024 limit: one thread per expert), then the
// routing it steers (training: the CPU's scores on both sides, so the choices agree exactly) and
// evaluation's, top-1 (σ) and top-4 (softmax), forward and backward.
TEST(DeviceMoeRouter, Sinkhorn) {
  for (const int64_t experts : {int64_t{8}, int64_t{40}, kMoeMaxExperts})
    for (const int64_t tokens : {int64_t{1}, int64_t{67}, int64_t{300}}) {
      SCOPED_TRACE(::testing::Message() << "E " << experts << " T " << tokens);
      DeviceCase dev;
      HostTensor logits = randn({tokens, experts}, 70 + tokens, 2.0f), scores = zeros({tokens, experts});
      const TensorView dlogits = dev.upload(logits), dscores = dev.poisoned(DType::f32, {tokens, experts});
      moe_sinkhorn_fwd(scores.view(), logits.view());
      moe_sinkhorn_fwd(dscores, dlogits);
      dev.expect_matches(dscores, scores, 0, 1e-5, "moe_sinkhorn_fwd");
      const TensorView balanced = dev.upload(scores);
      for (const int64_t topk : {int64_t{1}, int64_t{4}})
        for (const bool training : {true, false}) {
          SCOPED_TRACE(::testing::Message() << "k " << topk << " training " << training);
          MoeRouterOptions o;
          o.topk = topk;
          o.sinkhorn = true;
          HostTensor probs = zeros({tokens, topk}), indices = zeros({tokens, topk}, DType::i32);
          const TensorView dprobs = dev.poisoned(DType::f32, {tokens, topk}),
                           dindices = dev.poisoned(DType::i32, {tokens, topk});
          moe_router_fwd(probs.view(), indices.view(), logits.view(), TensorView(),
                         training ? scores.view() : TensorView(), o);
          moe_router_fwd(dprobs, dindices, dlogits, TensorView(), training ? balanced : TensorView(), o);
          dev.expect_matches(dindices, indices, 0, 0, "moe_router_fwd indices");
          dev.expect_matches(dprobs, probs, kAtol, kRtol, "moe_router_fwd probs");
          HostTensor grad = randn({tokens, topk}, 71), dx = randn({tokens, experts}, 72);
          const TensorView ddx = dev.upload(dx);
          moe_router_bwd(dx.view(), grad.view(), logits.view(), indices.view(), o);
          moe_router_bwd(ddx, dev.upload(grad), dlogits, dev.upload(indices), o);
          dev.expect_matches(ddx, dx, kAtol, kRtol, "moe_router_bwd");
        }
    }
}

TEST(DeviceMoeRouter, ExpertBiasUpdate) {
  for (int64_t layers : {int64_t{1}, int64_t{3}})
    for (int64_t experts : {int64_t{8}, int64_t{45}}) {
      DeviceCase dev;
      HostTensor bias = randn({layers, experts}, 60), counts = zeros({layers, experts});
      for (int64_t i = 0; i < layers * experts; ++i) counts.f32()[i] = static_cast<float>((i * 7) % 5);
      for (int64_t e = 0; e < experts; ++e) counts.f32()[e] = 2.0f;  // layer 0: every expert at the mean
      const TensorView dbias = dev.upload(bias);
      moe_expert_bias_update(bias.view(), counts.view(), 1e-3f);
      moe_expert_bias_update(dbias, dev.upload(counts), 1e-3f);
      dev.expect_matches(dbias, bias, 0, 0, "moe_expert_bias_update");
    }
}

}  // namespace
}  // namespace mt::test
