// plan/layout_search: the choices cover what they should and nothing the model cannot divide,
// and the step-time model behaves as documented: the bubble is compute·(p − 1)/(v·m), a group
// that leaves its node communicates at the network's speed, and an overlapped gradient
// reduction hides behind the backward.
#include "backend/backend.h"
#include "plan/layout_search.h"
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.num_layers = 4;
  m.hidden_size = 128;
  m.num_attention_heads = 4;
  m.seq_length = 256;
  m.vocab_size = 1000;
  m.params_dtype = DType::bf16;
  return m;
}

TrainConfig batch(int64_t global) {
  TrainConfig t;
  t.micro_batch_size = 1;
  t.global_batch_size = global;
  t.train_iters = 1;
  t.loss_scale.bf16 = true;
  return t;
}

LayoutEstimate estimate(ModelConfig m, TrainConfig t, const LayoutChoice& c, const DeviceModel& device) {
  m.tensor_model_parallel_size = c.tp;
  m.sequence_parallel = c.sp;
  m.context_parallel_size = c.cp;
  t.pipeline.pp = c.pp;
  if (c.vp > 1) t.pipeline.virtual_stages_per_rank = c.vp;
  t.micro_batch_size = c.micro_batch;
  t.use_distributed_optimizer = c.distributed_optimizer;
  const TrainingLayout layout = training_layout(m, t, 8, {Device::cpu, cpu_backend().max_threads()});
  return estimate_layout(layout, pipeline_plan(layout), c, device);
}

TEST(LayoutSearch, ChoicesDivideTheModelAndTheWorld) {
  const std::vector<LayoutChoice> choices = layout_choices(small_model(), 16, 8, 8);
  bool pipelined = false, interleaved = false, sharded = false, context = false;
  for (const LayoutChoice& c : choices) {
    EXPECT_EQ(8 % (c.tp * c.pp * c.cp), 0);
    EXPECT_EQ(small_model().seq_length % (2 * c.cp), 0) << "two chunks per context-parallel rank";
    EXPECT_EQ(4 % c.tp, 0) << "heads";
    EXPECT_EQ(4 % (c.pp * c.vp), 0) << "layers";
    EXPECT_EQ(c.sp, c.tp > 1);
    EXPECT_EQ((16 / (8 / (c.tp * c.pp * c.cp))) % c.micro_batch, 0);
    EXPECT_FALSE(c.distributed_optimizer && c.tp * c.pp == 8) << "no data or context parallelism to shard over";
    pipelined |= c.pp == 4;
    interleaved |= c.vp == 2;
    sharded |= c.distributed_optimizer;
    context |= c.cp == 8;
  }
  EXPECT_TRUE(pipelined && interleaved && sharded && context);
}

TEST(LayoutSearch, TheStepTimeModelBehavesAsDocumented) {
  const DeviceModel h100 = device_model("h100");
  const LayoutChoice pipelined{1, false, 2, 2, 1, 1, RecomputeGranularity::none, false};
  const LayoutEstimate e = estimate(small_model(), batch(32), pipelined, h100);
  const int m = 32 / 4;  // dp 4
  EXPECT_NEAR(e.bubble_s, e.compute_s * 1.0 / (2.0 * m), 1e-15);
  EXPECT_GT(e.comm_s, 0.0);
  // tp 2 on nodes of one device: its all-reduces cross the network.
  const LayoutChoice tensor{2, true, 1, 1, 1, 1, RecomputeGranularity::none, false};
  DeviceModel lonely = h100;
  lonely.devices_per_node = 1;
  EXPECT_NEAR(estimate(small_model(), batch(32), tensor, lonely).comm_s /
                  estimate(small_model(), batch(32), tensor, h100).comm_s,
              h100.link_bytes_per_s / h100.network_bytes_per_s, 1e-9);
  // Full recomputation reruns forwards: more compute.
  LayoutChoice full = tensor;
  full.recompute = RecomputeGranularity::full;
  ModelConfig m_full = small_model();
  m_full.recompute_granularity = RecomputeGranularity::full;
  m_full.recompute_method = RecomputeMethod::uniform;
  m_full.recompute_num_layers = 1;
  EXPECT_GT(estimate(m_full, batch(32), full, h100).compute_s, estimate(small_model(), batch(32), tensor, h100).compute_s);
  // An overlapped reduction hides behind the backward.
  TrainConfig overlapped = batch(32);
  overlapped.overlap_grad_reduce = true;
  const LayoutChoice data{1, false, 1, 1, 1, 1, RecomputeGranularity::none, false};
  EXPECT_LT(estimate(small_model(), overlapped, data, h100).comm_s, estimate(small_model(), batch(32), data, h100).comm_s);
  // Context parallelism splits each sequence's compute over its ranks and adds the ring's traffic.
  LayoutChoice context = data;
  context.cp = 2;
  const LayoutEstimate split = estimate(small_model(), batch(32), context, h100);
  const LayoutEstimate whole = estimate(small_model(), batch(32), data, h100);
  EXPECT_NEAR(split.compute_s, whole.compute_s, 1e-9 * whole.compute_s) << "cp 2 x dp 4 does the work of dp 8";
  EXPECT_GT(split.comm_s, whole.comm_s);
}

}  // namespace
}  // namespace mt
