// `megatron train --bf16 / --fp16` end to end: the trainer wires the 16-bit model, the loss
// scaler and the skip logic together; the curves must track the f32 run.
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig model(DType dtype) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 64;
  c.vocab_size = 128;
  c.params_dtype = dtype;
  return c;
}

TrainConfig training(DType dtype) {
  TrainConfig t;
  t.micro_batch_size = 4;
  t.global_batch_size = 8;
  t.train_iters = 40;
  t.eval_iters = 0;
  t.schedule.lr = 3e-3;
  t.schedule.lr_decay_style = "cosine";
  t.schedule.lr_warmup_iters = 5;
  t.loss_scale.bf16 = dtype == DType::bf16;
  t.loss_scale.fp16 = dtype == DType::f16;
  t.loss_scale.initial_loss_scale = 65536.0;
  return t;
}

std::vector<IterationStats> train(DType dtype, TrainConfig t) {
  Trainer trainer(model(dtype), t);
  return trainer.run([](const std::string&) {}).iterations;
}

TEST(TrainPrecision, Bf16AndFp16RunsTrackFp32) {
  const auto f32 = train(DType::f32, training(DType::f32));
  const auto bf16 = train(DType::bf16, training(DType::bf16));
  const auto fp16 = train(DType::f16, training(DType::f16));
  ASSERT_EQ(f32.size(), 40u);
  double worst_bf16 = 0.0, worst_fp16 = 0.0;
  for (size_t i = 0; i < f32.size(); ++i) {
    worst_bf16 = std::max(worst_bf16, std::fabs(bf16[i].loss - f32[i].loss));
    worst_fp16 = std::max(worst_fp16, std::fabs(fp16[i].loss - f32[i].loss));
    EXPECT_FALSE(fp16[i].skipped) << i;  // 2^16 does not overflow this model
    EXPECT_EQ(fp16[i].loss_scale, 65536.0f);  // no growth within the 1000-step window
  }
  EXPECT_LT(f32.back().loss, f32.front().loss - 1.0);
  // Observed ~0.003 / ~0.002; bounds with ~10x margin.
  EXPECT_LT(worst_bf16, 0.03) << "bf16";
  EXPECT_LT(worst_fp16, 0.02) << "fp16";
}

TEST(TrainPrecision, Fp16OverflowSkipsIterationsWithoutAdvancingTheSchedule) {
  TrainConfig t = training(DType::f16);
  t.loss_scale.initial_loss_scale = 4294967296.0;  // Megatron's default: overflows at first
  t.train_iters = 30;
  const auto run = train(DType::f16, t);
  int skipped = 0;
  for (const IterationStats& st : run) skipped += st.skipped;
  ASSERT_GE(skipped, 3);
  EXPECT_TRUE(run[0].skipped && run[1].skipped);
  // Scales as logged, after each update: hysteresis 2 keeps the scale at the first overflow, the
  // second halves it.
  EXPECT_EQ(run[0].loss_scale, 4294967296.0f);
  EXPECT_EQ(run[1].loss_scale, 2147483648.0f);
  // A skipped step leaves the schedule where it was: the LR of the first real update is the
  // warmup's first value (lr((i−1)·gbs) with i counting only successful updates).
  size_t first_update = 0;
  while (run[first_update].skipped) ++first_update;
  EXPECT_EQ(run[first_update].lr, 0.0f);
  EXPECT_FALSE(run.back().skipped);
  EXPECT_LT(run.back().loss, run.front().loss);
}

}  // namespace
}  // namespace mt
