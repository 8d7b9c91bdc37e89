// --bf16 / --fp16: 16-bit parameters and activations with f32 main parameters and gradients.
// Loss curves must track the f32 run; fp16 overflow must skip the step and back the scale off;
// memory must shrink the way the dtypes imply.
#include <cmath>
#include <cstdio>

#include "model/gpt.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "testing.h"
#include "train/synthetic_data.h"

namespace mt {
namespace {

ModelConfig small_llama(DType dtype) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.seq_length = 32;
  c.vocab_size = 96;
  c.make_vocab_size_divisible_by = 32;
  c.normalization = Normalization::rmsnorm;
  c.activation = Activation::swiglu;
  c.position_embedding_type = PositionEmbedding::rope;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  c.params_dtype = dtype;
  c.finalize();
  return c;
}

struct TrainRun {
  std::vector<double> losses;
  int skipped = 0;
  std::vector<bool> found_inf;
  std::vector<float> scales;  // after each step's update
};

// Trains on the same synthetic batches; fp16 uses a dynamic loss scaler.
TrainRun train(DType dtype, int steps, double initial_scale = 65536.0) {
  const ModelConfig c = small_llama(dtype);
  const int64_t b = 4;
  GptModel model(c, b, cpu_backend(), nullptr);
  model.params().init(21);
  Optimizer optimizer(model.params().params(), cpu_backend(), nullptr);
  OptimizerConfig oc;
  oc.lr = 3e-3f;
  DynamicLossScaleConfig lc;
  lc.initial_scale = initial_scale;
  LossScaler scaler = dtype == DType::f16 ? LossScaler::make_dynamic(lc) : LossScaler::make_constant(1.0);
  const SyntheticTokens data(c.vocab_size, c.seq_length, 5);
  std::vector<int32_t> tokens, labels;
  TrainRun run;
  for (int step = 0; step < steps; ++step) {
    data.batch(step * b, b, tokens, labels);
    const MicroBatch batch{TensorView(tokens.data(), DType::i32, {b, c.seq_length}),
                           TensorView(labels.data(), DType::i32, {b, c.seq_length}), TensorView()};
    ForwardOptions fo;
    fo.grad_scale = scaler.scale() / static_cast<float>(b * c.seq_length);
    model.params().zero_grads();
    const LossSums sums = model.forward(batch, fo);
    model.backward();
    const auto result = optimizer.step(oc, oc.lr, oc.weight_decay, scaler.scale());
    if (dtype == DType::f16) scaler.update(result.found_inf);
    run.skipped += result.found_inf;
    run.found_inf.push_back(result.found_inf);
    run.losses.push_back(sums.loss_sum / sums.num_tokens);
    run.scales.push_back(scaler.scale());
  }
  return run;
}

TEST(MixedPrecision, Bf16AndFp16TrackTheFp32LossCurve) {
  const int steps = 40;
  const TrainRun f32 = train(DType::f32, steps), bf16 = train(DType::bf16, steps), fp16 = train(DType::f16, steps);
  double worst_bf16 = 0.0, worst_fp16 = 0.0;
  for (int i = 0; i < steps; ++i) {
    worst_bf16 = std::max(worst_bf16, std::fabs(bf16.losses[i] - f32.losses[i]));
    worst_fp16 = std::max(worst_fp16, std::fabs(fp16.losses[i] - f32.losses[i]));
  }
  std::printf("loss f32 %.4f -> %.4f | max |bf16 - f32| %.4f, max |fp16 - f32| %.4f, fp16 skipped %d\n",
              f32.losses.front(), f32.losses.back(), worst_bf16, worst_fp16, fp16.skipped);
  // The run must learn for the comparison to mean anything.
  EXPECT_LT(f32.losses.back(), f32.losses.front() - 1.0);
  // Observed 0.004 (bf16, 8 mantissa bits) and 0.002 (fp16, 11 bits) over 40 steps; the bounds
  // leave ~7x. A wrong rounding point, a lost master copy or unscaled gradients give O(0.1..1).
  EXPECT_LT(worst_bf16, 0.03);
  EXPECT_LT(worst_fp16, 0.015);
  EXPECT_EQ(fp16.skipped, 0);  // 2^16 is small enough for this model
  // 16-bit runs must not be bit-identical to f32 (the rounding is really applied).
  EXPECT_NE(bf16.losses[5], f32.losses[5]);
  EXPECT_NE(fp16.losses[5], f32.losses[5]);
}

TEST(MixedPrecision, Fp16OverflowSkipsTheStepAndBacksOffTheScale) {
  // 2^32 times the loss gradient overflows fp16 activation gradients (max 65504).
  const TrainRun run = train(DType::f16, 24, 4294967296.0);
  ASSERT_TRUE(run.found_inf[0] && run.found_inf[1]);
  // Hysteresis 2: the first overflow keeps the scale; after that every overflow halves it and a
  // clean step keeps it (growth needs 1000 clean steps).
  EXPECT_EQ(run.scales[0], 4294967296.0f);
  for (size_t i = 1; i < run.scales.size(); ++i)
    EXPECT_EQ(run.scales[i], run.found_inf[i] ? run.scales[i - 1] / 2 : run.scales[i - 1]) << "step " << i;
  // Once the scale is small enough, steps go through and the model learns.
  EXPECT_FALSE(run.found_inf.back());
  EXPECT_LT(run.losses.back(), run.losses.front());
  std::printf("fp16 from 2^32: %d skipped steps, scale settled at %g\n", run.skipped, run.scales.back());
}

TEST(MixedPrecision, SkippedStepLeavesParametersUntouched) {
  const ModelConfig c = small_llama(DType::f16);
  GptModel model(c, 2, cpu_backend(), nullptr);
  model.params().init(3);
  Optimizer optimizer(model.params().params(), cpu_backend(), nullptr);
  const Param& p = model.params().params()[1];
  const std::vector<uint16_t> before(p.value.f16(), p.value.f16() + p.value.numel());
  test::HostTensor tokens = test::randint({2, c.seq_length}, 96, 1), labels = test::randint({2, c.seq_length}, 96, 2);
  ForwardOptions fo;
  fo.grad_scale = 1e12f;
  model.params().zero_grads();
  model.forward({tokens.view(), labels.view(), TensorView()}, fo);
  model.backward();
  const auto result = optimizer.step(OptimizerConfig{}, 1e-3f, 0.0f, 1e12f);
  EXPECT_TRUE(result.found_inf);
  EXPECT_EQ(optimizer.steps(), 0);
  EXPECT_EQ(std::vector<uint16_t>(p.value.f16(), p.value.f16() + p.value.numel()), before);
}

TEST(MixedPrecision, MemoryFollowsTheDtypes) {
  MemoryTracker m32, m16;
  GptModel a(small_llama(DType::f32), 2, cpu_backend(), &m32);
  Optimizer oa(a.params().params(), cpu_backend(), &m32);
  GptModel b(small_llama(DType::bf16), 2, cpu_backend(), &m16);
  Optimizer ob(b.params().params(), cpu_backend(), &m16);
  const size_t n = static_cast<size_t>(a.params().numel());
  // Megatron's 18 bytes per parameter: 2 (bf16 weights) + 4 (f32 grads) + 12 (main, m, v).
  EXPECT_EQ(m16.peak(MemCategory::weights), 2 * n);
  EXPECT_EQ(m16.peak(MemCategory::grads), 4 * n);
  EXPECT_EQ(m16.peak(MemCategory::optimizer), 12 * n);
  EXPECT_EQ(m32.peak(MemCategory::optimizer), 8 * n);
  // Saved activations: most are 16-bit now (norm statistics, lse, masks and the final-norm
  // gradient stay f32/u8), so they take well under 60% of the f32 bytes.
  EXPECT_LT(m16.peak(MemCategory::activations), m32.peak(MemCategory::activations) * 6 / 10);
  EXPECT_GT(m16.peak(MemCategory::activations), m32.peak(MemCategory::activations) * 4 / 10);
}

}  // namespace
}  // namespace mt
