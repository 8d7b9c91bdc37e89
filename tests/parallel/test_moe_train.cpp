// MoE models under parallel layouts against the single-rank run (same loss curve, gradient norms
// and, where every rank holds whole parameters, final weights), dropout on: the router, the
// experts and the auxiliary losses under tensor + sequence parallelism with whole experts on
// every rank (expert tensor parallelism 1: experts laid out independently of attention), under
// pipeline parallelism with MoE and dense layers mixed, under data parallelism with the
// distributed optimizer and a capacity factor, and with Sinkhorn routing.
#include "train_testing.h"

namespace mt::test {
namespace {

ModelConfig moe_style(const char* layers = "1") {
  ModelConfig m = llama_style();
  m.num_layers = 4;
  m.moe.num_experts = 4;
  m.moe.router.topk = 2;
  m.moe.ffn_hidden_size = 48;
  m.moe.layer_freq = layers;
  m.moe.expert_tensor_parallel_size = 1;
  m.moe.aux_loss_coeff = 1e-2;
  m.moe.z_loss_coeff = 1e-3;
  m.moe.experts_impl = MoeExpertsImpl::grouped;
  return m;
}

TEST(MoeTrain, TensorSequenceParallelWithWholeExpertsMatchesSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  ModelConfig m = moe_style();
  m.moe.shared_expert_intermediate_size = 32;
  m.moe.load_balancing = MoeLoadBalancing::seq_aux_loss;
  m.moe.router.score_function = MoeScoreFunction::sigmoid;
  m.moe.router.num_groups = 2;
  m.moe.router.group_topk = 1;
  m.moe.expert_bias = true;  // its counts summed over the tp ranks' shards
  m.moe.bias_update_rate = 1e-2f;
  expect_same_curve(m, 2, true);  // dropless: the same tokens reach the same experts
}

TEST(MoeTrain, PipelineWithMoeAndDenseLayersMatchesSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  TrainConfig run = short_run();
  run.pipeline.pp = 2;
  ModelConfig m = moe_style("[1,0,1,1]");
  m.moe.capacity.capacity_factor = 1.0;  // per micro-batch, as on one rank: the same tokens are dropped
  m.moe.capacity.drop_policy = MoeDropPolicy::position;
  expect_same_curve(m, 1, false, run);
}

TEST(MoeTrain, DataParallelDistributedOptimizerWithCapacityMatchesSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  TrainConfig run = short_run();
  run.use_distributed_optimizer = true;
  ModelConfig m = moe_style();
  m.moe.capacity.capacity_factor = 1.25;
  m.moe.capacity.pad_to_capacity = true;
  expect_same_curve(m, 1, false, run);
  // Two distributed-optimizer instances: dense and expert state sharded within halves of dp.
  run.num_distributed_optimizer_instances = 2;
  if (world().size() == 4) expect_same_curve(m, 1, false, run);
}

// Expert parallelism: the experts split over ep ranks (taken from data parallelism), tokens
// dispatched to them and back, expert gradients reduced over expert-dp. Both dispatchers,
// dropless and with a capacity (per micro-batch, so the same tokens are dropped as on one rank).
TEST(MoeTrain, ExpertParallelMatchesSingleRank) {
  const int n = world().size();
  if (n != 2 && n != 4) GTEST_SKIP();
  for (const MoeDispatcher dispatcher : {MoeDispatcher::alltoall, MoeDispatcher::allgather})
    for (const bool capacity : {false, true}) {
      SCOPED_TRACE(std::string(dispatcher == MoeDispatcher::alltoall ? "alltoall" : "allgather") +
                   (capacity ? ", capacity 1.0" : ", dropless") + ", ep " + std::to_string(n));
      ModelConfig m = moe_style();
      m.moe.expert_model_parallel_size = n;  // ep 2, or ep 4
      m.moe.dispatcher = dispatcher;
      if (capacity) m.moe.capacity.capacity_factor = 1.0;
      expect_same_curve(m, 1, false);
    }
}

// ep 2 with the distributed optimizer (expert state sharded over expert-dp, dense over dp), and
// with pipeline parallelism (ep 2 × pp 2 on 4 ranks).
TEST(MoeTrain, ExpertParallelWithDistributedOptimizerAndPipeline) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  ModelConfig m = moe_style("[1,0,1,1]");
  m.moe.expert_model_parallel_size = 2;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  TrainConfig run = short_run();
  run.use_distributed_optimizer = true;
  expect_same_curve(m, 1, false, run);
  if (world().size() != 4) return;
  run.use_distributed_optimizer = false;
  run.pipeline.pp = 2;
  expect_same_curve(m, 1, false, run);
}

// MoE parallel folding: attention over tp 2 with sequence parallelism, experts over ep 2 with
// etp 1 (4 ranks: each expert-parallel group crosses the tensor-parallel one).
TEST(MoeTrain, FoldedExpertParallelUnderTensorParallelMatchesSingleRank) {
  if (world().size() != 4) GTEST_SKIP();
  ModelConfig m = moe_style();
  m.moe.expert_model_parallel_size = 2;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  m.moe.shared_expert_intermediate_size = 32;
  expect_same_curve(m, 2, true);
}

// Sinkhorn routing (top-1, no aux loss, z-loss on): under tp 2 + sp each rank gathers the sequence
// shards' router logits and normalises the whole micro-batch, so it routes as the single rank does
// (Megatron normalises each shard alone); also under ep 2, and on 4 ranks tp 2 + sp with ep 2.
// The evaluations route without Sinkhorn (the top-1 of σ).
TEST(MoeTrain, SinkhornMatchesSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  ModelConfig m = moe_style();
  m.moe.load_balancing = MoeLoadBalancing::sinkhorn;
  m.moe.aux_loss_coeff = 0.0;
  m.moe.router.topk = 1;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  TrainConfig run = short_run();
  run.eval_interval = 10;
  run.eval_iters = 1;
  expect_same_curve(m, 2, true, run);
  m.moe.expert_model_parallel_size = 2;
  expect_same_curve(m, world().size() == 4 ? 2 : 1, world().size() == 4, run);
}

// Expert tensor parallelism (Megatron's default etp = tp): every expert split over the two
// tensor-parallel ranks (fc1 by rows, fc2 by columns), the tokens of both sequence shards gathered
// to them and the partial outputs summed back; both dispatchers; on 4 ranks also ep 2 x etp 2.
TEST(MoeTrain, ExpertTensorParallelMatchesSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  for (const MoeDispatcher dispatcher : {MoeDispatcher::alltoall, MoeDispatcher::allgather}) {
    ModelConfig m = moe_style();
    m.moe.expert_tensor_parallel_size = 2;
    m.moe.dispatcher = dispatcher;
    expect_same_curve(m, 2, true);
    if (world().size() != 4) continue;
    m.moe.expert_model_parallel_size = 2;  // and split over ep 2 x etp 2 (expert-dp 1)
    expect_same_curve(m, 2, true);
  }
}

// A Qwen3-MoE-shaped toy: query and key norms (--qk-layernorm), softmax top-2 of 8 experts
// renormalised over the chosen two (Megatron's default, Hugging Face's norm_topk_prob), an f32
// router, the alltoall dispatcher and the auxiliary loss; under ep 2, then attention over tp 2 + sp
// with experts over ep 2 × etp 1 (folding; 2 ranks: ep inside tp), and on 4 ranks ep 2 × pp 2.
TEST(MoeTrain, Qwen3MoeShapedMatchesSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  ModelConfig m = moe_style();
  m.qk_layernorm = true;
  m.moe.num_experts = 8;
  m.moe.router_fp32 = true;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  m.moe.expert_model_parallel_size = 2;
  expect_same_curve(m, 1, false);
  expect_same_curve(m, 2, true);
  if (world().size() != 4) return;
  TrainConfig run = short_run();
  run.pipeline.pp = 2;
  expect_same_curve(m, 1, false, run);
}

// --recompute-modules moe shared_experts: each MoE block's forward, dispatch included, reruns before
// its backward; under tp 2 + sp with the experts over ep 2 the rerun's collectives match the
// forward's on every rank.
TEST(MoeTrain, RecomputedMoeBlocksMatchSingleRank) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  ModelConfig m = moe_style();
  m.moe.shared_expert_intermediate_size = 32;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  m.moe.expert_model_parallel_size = 2;
  m.recompute_granularity = RecomputeGranularity::selective;
  m.recompute_moe = m.recompute_shared_experts = true;
  expect_same_curve(m, 2, true);
}

}  // namespace
}  // namespace mt::test
