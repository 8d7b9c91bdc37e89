// The MoE block inside the model: a whole-model gradient check (routing to every expert, so the
// loss is smooth and central differences apply; the top-k choice itself is tested op by op),
// equality with the dense MLP when one expert takes every token, the start-up refusals, and
// mixed-precision, recomputation and evaluation paths through MoE layers.
#include <cmath>
#include <cstring>

#include "model/gpt.h"
#include "model/params.h"
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig tiny_moe(bool llama) {
  ModelConfig c = test::tiny_gpt(llama, 9);
  c.add_bias_linear = false;
  c.moe.num_experts = 4;
  c.moe.ffn_hidden_size = 16;
  c.finalize();
  return c;
}

// The loss a training forward reports plus what its auxiliary losses add (each weighted
// aux_loss_scale, as their gradients are).
double total_loss(GptModel& model, const MicroBatch& batch, const ForwardOptions& options) {
  const MoeConfig& m = model.config().moe;
  model.stage().reset_moe_stats();
  double loss = options.grad_scale * model.forward(batch, options).loss_sum;
  model.backward();
  for (const MoeLayerStats& s : model.stage().moe_stats())
    loss += options.aux_loss_scale * (s.aux_loss * m.aux_loss_coeff + s.z_loss * m.z_loss_coeff);
  return loss;
}

void gradcheck(ModelConfig c) {
  const int64_t b = 2;
  GptModel model(c, b, cpu_backend(), nullptr);
  model.init(7);
  test::HostTensor tokens = test::randint({b, c.seq_length}, static_cast<int32_t>(c.vocab_size), 11);
  test::HostTensor labels = test::randint({b, c.seq_length}, static_cast<int32_t>(c.vocab_size), 12);
  const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
  ForwardOptions train;
  train.first_sample = 5;
  train.grad_scale = 0.7f;
  train.aux_loss_scale = 3.0f;  // large enough that a dropped auxiliary term shows
  model.stage().zero_grads();
  model.forward(batch, train);
  model.backward();
  std::vector<Param*> params;
  for (ParamStore* store : model.stage().param_stores())
    for (Param& p : store->params()) params.push_back(&p);
  std::vector<std::vector<float>> analytic;
  for (const Param* p : params) analytic.emplace_back(p->grad.f32(), p->grad.f32() + p->grad.numel());

  int moe_params = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    Param& p = *params[k];
    const std::vector<float>& g = analytic[k];
    moe_params += p.name.find(".mlp.router.") != std::string::npos || p.name.find(".mlp.experts.") != std::string::npos ||
                  p.name.find(".shared_experts.") != std::string::npos;
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < 8; ++i) idx.push_back(p.value.numel() * i / 8);
    double num = 0.0, den = 0.0;
    for (int64_t i : idx) {
      float* w = p.value.f32() + i;
      const float saved = *w;
      const double h = 1e-2;
      *w = static_cast<float>(saved + h);
      const double up = total_loss(model, batch, train);
      *w = static_cast<float>(saved - h);
      const double down = total_loss(model, batch, train);
      *w = saved;
      const double fd = (up - down) / (2 * h);
      num += (fd - g[static_cast<size_t>(i)]) * (fd - g[static_cast<size_t>(i)]);
      den += fd * fd;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-20));
    EXPECT_LT(rel, 2e-2) << p.name << " relative error " << rel << " (|g| " << std::sqrt(den) << ")";
    EXPECT_GT(den, 1e-14) << p.name << " has no gradient at the probed entries";
  }
  EXPECT_GE(moe_params, 3);
}

// Every token goes to all experts (top-k = E): the routing weights are smooth functions of the
// router, so finite differences see the router's gradient through the combine, the z-loss and
// the shared expert.
TEST(MoeModel, GradcheckSoftmaxWithSharedExpertAndZLoss) {
  ModelConfig c = tiny_moe(false);
  c.moe.router.topk = 4;
  c.moe.router.pre_softmax = true;
  c.moe.shared_expert_intermediate_size = 12;
  c.moe.z_loss_coeff = 5e-2;
  c.moe.aux_loss_coeff = 1e-2;  // its gradient vanishes with k = E, but it runs
  c.moe.layer_freq = "[1,1]";
  c.finalize();
  gradcheck(c);
}

TEST(MoeModel, GradcheckSigmoidSwigluScaled) {
  ModelConfig c = tiny_moe(true);
  c.moe.router.topk = 4;
  c.moe.router.score_function = MoeScoreFunction::sigmoid;
  c.moe.router.scaling_factor = 2.5f;
  c.moe.z_loss_coeff = 5e-2;
  c.moe.layer_freq = "[0,1]";  // a dense layer, then an MoE one
  c.moe.experts_impl = MoeExpertsImpl::grouped;
  c.finalize();
  gradcheck(c);
}

// Sinkhorn routing in training, every token to all experts (top-k = E: softmax weights over the
// whole row, so the loss is smooth although the choice runs through Sinkhorn's scores).
TEST(MoeModel, GradcheckSinkhornWithZLoss) {
  ModelConfig c = tiny_moe(true);
  c.moe.router.topk = 4;
  c.moe.load_balancing = MoeLoadBalancing::sinkhorn;
  c.moe.z_loss_coeff = 5e-2;
  c.finalize();
  gradcheck(c);
}

// One expert that every token goes to with weight 1 (softmax over one logit) is the dense MLP
// without biases: same loss and same gradients, bit for bit, once its weights are the MLP's.
TEST(MoeModel, OneExpertIsTheDenseMlp) {
  for (const auto [llama, qk_norm] : {std::pair{false, false}, {true, false}, {true, true}}) {
    ModelConfig dense = test::tiny_gpt(llama, 9);
    dense.add_bias_linear = false;
    dense.qk_layernorm = qk_norm;
    dense.finalize();
    ModelConfig moe = dense;
    moe.moe.num_experts = 1;
    moe.moe.router.topk = 1;
    moe.moe.router.pre_softmax = true;
    moe.finalize();
    GptModel a(dense, 2, cpu_backend(), nullptr), e(moe, 2, cpu_backend(), nullptr);
    a.params().init(3);
    e.init(3);
    for (int64_t layer = 0; layer < dense.num_layers; ++layer) {
      const std::string p = "decoder.layers." + std::to_string(layer) + ".mlp.";
      for (const char* fc : {"linear_fc1.weight", "linear_fc2.weight"}) {
        const TensorView from = a.params().get(p + fc).value, to = e.stage().param(p + "experts." + fc).value;
        ASSERT_EQ(from.numel(), to.numel());
        std::memcpy(to.data, from.data, from.bytes());
      }
    }
    // Every other parameter has the same name and so the same initial values.
    test::HostTensor tokens = test::randint({2, 9}, 37, 1), labels = test::randint({2, 9}, 37, 2);
    const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
    ForwardOptions train;
    train.grad_scale = 0.5f;
    train.aux_loss_scale = 1.0f;
    a.params().zero_grads();
    e.stage().zero_grads();
    EXPECT_EQ(a.forward(batch, {}).loss_sum, e.forward(batch, {}).loss_sum) << "evaluation, llama " << llama;
    EXPECT_EQ(a.forward(batch, train).loss_sum, e.forward(batch, train).loss_sum) << "llama " << llama;
    a.backward();
    e.backward();
    for (const Param& p : a.params().params()) {
      std::string name = p.name;
      if (name.find(".mlp.linear_fc") != std::string::npos) name.insert(name.find("linear_fc"), "experts.");
      const Param& q = e.stage().param(name);
      EXPECT_EQ(std::memcmp(p.grad.data, q.grad.data, p.grad.bytes()), 0) << p.name << " llama " << llama;
    }
    for (const Param& p : e.params().params())  // the router is a dense parameter
      if (p.name.find("router") != std::string::npos)
        for (int64_t i = 0; i < p.grad.numel(); ++i) ASSERT_EQ(p.grad.f32()[i], 0.0f) << p.name;
  }
}

// What a training forward reports: token counts per expert (padding included) and dropped
// choices under a capacity, and nothing from evaluation or a recomputation's rerun.
TEST(MoeModel, StatsCountTokensAndDroppedChoices) {
  for (const bool full_recompute : {false, true}) {
    ModelConfig c = tiny_moe(false);
    c.moe.router.topk = 2;
    c.moe.capacity.capacity_factor = 0.5;  // C = ceil(18·2/4·0.5) = 5 of the 18 tokens' 36 choices
    c.moe.aux_loss_coeff = 1e-2;
    if (full_recompute) c.recompute_granularity = RecomputeGranularity::full;
    c.finalize();
    GptModel model(c, 2, cpu_backend(), nullptr);
    model.init(3);
    test::HostTensor tokens = test::randint({2, 9}, 37, 1), labels = test::randint({2, 9}, 37, 2);
    const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
    ForwardOptions train;
    train.grad_scale = 1.0f;
    train.aux_loss_scale = 1.0f;
    model.stage().reset_moe_stats();
    model.forward(batch, train);
    model.backward();
    model.forward_only(batch);
    for (const MoeLayerStats& s : model.stage().moe_stats()) {
      EXPECT_EQ(s.micro_batches, 1);
      EXPECT_EQ(s.choices, 36.0);
      double kept = 0.0;
      for (const double n : s.tokens_per_expert) {
        EXPECT_LE(n, 5.0);
        kept += n;
      }
      EXPECT_EQ(kept + s.dropped, 36.0);
      EXPECT_GT(s.dropped, 0.0);
      EXPECT_GT(s.aux_loss, 0.0);
    }
  }
}

// Mixed precision and recomputation (full, or selective of the MoE block or its shared expert)
// run the same MoE forward (the rerun reproduces the saved routing exactly), so gradients agree
// with the plain run bit for bit.
TEST(MoeModel, RecomputationGivesTheSameGradients) {
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const int variant : {0, 1, 2}) {  // full; selective moe + shared_experts; selective shared_experts
      ModelConfig plain = tiny_moe(true);
      plain.moe.aux_loss_coeff = 1e-2;
      plain.moe.z_loss_coeff = 1e-3;
      plain.moe.shared_expert_intermediate_size = 8;
      plain.params_dtype = dtype;
      plain.finalize();
      ModelConfig recomputing = plain;
      if (variant == 0) {
        recomputing.recompute_granularity = RecomputeGranularity::full;
        recomputing.recompute_num_layers = 2;
      } else {
        recomputing.recompute_granularity = RecomputeGranularity::selective;
        recomputing.recompute_moe = variant == 1;
        recomputing.recompute_shared_experts = true;
      }
      recomputing.finalize();
      SCOPED_TRACE("variant " + std::to_string(variant) + " " + std::string(dtype_name(dtype)));
      std::vector<std::vector<float>> grads[2];
      double losses[2];
      for (int k = 0; k < 2; ++k) {
        GptModel model(k == 0 ? plain : recomputing, 2, cpu_backend(), nullptr);
        model.init(5);
        test::HostTensor tokens = test::randint({2, 9}, 37, 1), labels = test::randint({2, 9}, 37, 2);
        const MicroBatch batch{tokens.view(), labels.view(), TensorView()};
        ForwardOptions train;
        train.grad_scale = 1.0f;
        train.aux_loss_scale = 1.0f;
        model.stage().zero_grads();
        losses[k] = model.forward(batch, train).loss_sum;
        model.backward();
        for (ParamStore* store : model.stage().param_stores())
          for (const Param& p : store->params()) {
            std::vector<float> g(static_cast<size_t>(p.grad.numel()));
            std::memcpy(g.data(), p.grad.data, p.grad.bytes());
            grads[k].push_back(g);
          }
      }
      EXPECT_EQ(losses[0], losses[1]);
      for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_EQ(grads[0][i], grads[1][i]) << "param " << i;
    }
}

TEST(MoeModel, RefusesWhatCannotWork) {
  auto refused = [](auto change, const char* needle) {
    ModelConfig c = test::tiny_gpt(false, 9);
    c.add_bias_linear = false;
    c.moe.num_experts = 4;
    change(c);
    try {
      c.finalize();
      ADD_FAILURE() << "accepted; expected a message with '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused([](ModelConfig& c) { c.moe.router.topk = 5; }, "--moe-router-topk 5");
  refused([](ModelConfig& c) { c.add_bias_linear = true; }, "--disable-bias-linear");
  refused([](ModelConfig& c) { c.moe.expert_model_parallel_size = 3; }, "--num-experts 4 is not divisible by --expert-model-parallel-size 3");
  refused([](ModelConfig& c) { c.moe.router.topk = 1; }, "--moe-router-pre-softmax");
  refused([](ModelConfig& c) { c.moe.router.num_groups = 3; c.moe.router.group_topk = 1; }, "--moe-router-num-groups 3");
  refused([](ModelConfig& c) { c.moe.capacity.pad_to_capacity = true; }, "--moe-expert-capacity-factor");
  refused([](ModelConfig& c) { c.moe.layer_freq = "[1,0,1]"; }, "lists 3 layers");
  refused([](ModelConfig& c) { c.moe.layer_freq = "two"; }, "--moe-layer-freq");
  refused([](ModelConfig& c) { c.moe.expert_bias = true; }, "sigmoid");
  {  // Training splits an MoE layer's tokens over tp first (--sequence-parallel); inference does not.
    ModelConfig c = test::tiny_gpt(false, 9);
    c.add_bias_linear = false;
    c.moe.num_experts = 4;
    c.tensor_model_parallel_size = 2;
    ModelConfig model = c;
    EXPECT_NO_THROW(model.finalize());
    test::expect_error_mentioning([&] { training_layout(c, TrainConfig{}, 2, WorkspaceTarget{}); }, "--sequence-parallel");
  }
  const auto sinkhorn = [](ModelConfig& c) {
    c.moe.load_balancing = MoeLoadBalancing::sinkhorn;
    c.moe.router.topk = 1;  // top-1 without pre-softmax: σ weights, accepted
  };
  refused([&](ModelConfig& c) { sinkhorn(c); c.moe.aux_loss_coeff = 1e-2; }, "does not support aux loss");
  refused([&](ModelConfig& c) { sinkhorn(c); c.moe.router.pre_softmax = true; }, "--moe-router-pre-softmax");
  refused([&](ModelConfig& c) { sinkhorn(c); c.moe.router.scaling_factor = 2.0f; }, "--moe-router-topk-scaling-factor");
  ModelConfig c = test::tiny_gpt(false, 9);
  c.add_bias_linear = false;
  c.moe.num_experts = 4;
  sinkhorn(c);
  c.finalize();
  EXPECT_TRUE(c.moe.router.sinkhorn);
  EXPECT_FALSE(c.moe.aux_loss());
}

// Aux-loss-free balancing: after each step every MoE layer's bias moves by the rate towards
// balance, bias += rate · sign(mean count − count), from the step's token counts; the logged
// counts are those (each layer's rows per expert over the global batch).
TEST(MoeModel, ExpertBiasFollowsTheUpdateRule) {
  ModelConfig m = test::tiny_gpt(true, 16);
  m.moe.num_experts = 4;
  m.moe.router.topk = 2;
  m.moe.router.score_function = MoeScoreFunction::sigmoid;
  m.moe.expert_bias = true;
  m.moe.bias_update_rate = 0.25f;
  TrainConfig run;
  run.micro_batch_size = 2;
  run.global_batch_size = 4;
  run.train_iters = 3;
  run.eval_iters = 0;
  run.schedule.lr = 1e-3;
  Trainer trainer(m, run);
  std::vector<float> before(8, 0.0f);
  for (int step = 0; step < 3; ++step) {
    const IterationStats st = trainer.train_step();
    const auto& biases = trainer.model().expert_biases();
    ASSERT_EQ(biases.size(), 2u);
    for (size_t l = 0; l < 2; ++l) {
      double mean = 0.0;
      for (int e = 0; e < 4; ++e) mean += st.moe.tokens_per_expert[l * 4 + e] / 4.0;
      double total = 0.0;
      for (int e = 0; e < 4; ++e) {
        const double count = st.moe.tokens_per_expert[l * 4 + e];
        total += count;
        const float want = before[l * 4 + e] + 0.25f * static_cast<float>((mean > count) - (mean < count));
        EXPECT_EQ(biases[l].second.f32()[e], want) << "layer " << l << " expert " << e << " step " << step;
        before[l * 4 + e] = biases[l].second.f32()[e];
      }
      EXPECT_EQ(total, 4.0 * 16 * 2) << "every token's two choices, summed over the global batch";
    }
  }
}

// global_aux_loss weighs the running mean of the counts over the global batch's micro-batches
// (and data-parallel ranks): with one micro-batch per iteration on one rank that is the micro-batch's
// own counts, so it trains exactly as aux_loss does; with two it differs.
TEST(MoeModel, GlobalAuxLossIsTheRunningMeanOfTheCounts) {
  const auto curve = [](MoeLoadBalancing balancing, int64_t global_batch) {
    ModelConfig m = test::tiny_gpt(true, 16);
    m.moe.num_experts = 4;
    m.moe.aux_loss_coeff = 0.5;  // large, so the loss shapes training visibly
    m.moe.load_balancing = balancing;
    TrainConfig run;
    run.micro_batch_size = 2;
    run.global_batch_size = global_batch;
    run.train_iters = 4;
    run.eval_iters = 0;
    run.schedule.lr = 1e-2;
    Trainer trainer(m, run);
    std::vector<double> out;
    for (int i = 0; i < 4; ++i) {
      const IterationStats st = trainer.train_step();
      out.push_back(st.loss);
      EXPECT_EQ(st.moe.losses.at(0).first, balancing == MoeLoadBalancing::global_aux_loss ? "global_load_balancing_loss"
                                                                                            : "load_balancing_loss");
      out.push_back(st.moe.losses.at(0).second);
    }
    return out;
  };
  EXPECT_EQ(curve(MoeLoadBalancing::global_aux_loss, 2), curve(MoeLoadBalancing::aux_loss, 2));
  EXPECT_NE(curve(MoeLoadBalancing::global_aux_loss, 4), curve(MoeLoadBalancing::aux_loss, 4));
}

}  // namespace
}  // namespace mt
