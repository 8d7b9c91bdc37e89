// End to end: pipeline parallelism (1F1B over the job's ranks, alone or with data and tensor
// parallelism) reproduces the single-rank loss curve over 20 iterations with dropout on, with the
// same evaluation losses and, with tp = 1, the same final weights on every stage. Stages own
// global layers (init and dropout masks are keyed by global layer), so only the order of
// floating-point sums differs: the tied embedding's two copies are summed over the embedding
// group instead of accumulated in one buffer.
#include "train_testing.h"

namespace mt::test {
namespace {

TrainConfig pipelined(int pp, TrainConfig run = short_run()) {
  run.pipeline.pp = pp;
  run.eval_interval = 10;  // evaluations through the forward-only schedule
  run.eval_iters = 2;
  return run;
}

ModelConfig with_layers(ModelConfig m, int64_t layers) {
  m.num_layers = layers;
  return m;
}

// pp = 2 (with dp = 2 on 4 ranks): the tied GPT-2 style (the output layer's copy of the
// embedding on the last stage) and the untied Llama style.
TEST(PpTrain, TwoStagesMatchSingleRank) {
  expect_same_curve(gpt2_style(), 1, false, pipelined(2));
  expect_same_curve(llama_style(), 1, false, pipelined(2));
}

// pp = 4: even, and uneven first/last stages (1 + 2 + 2 + 1 layers), and the embedding and loss
// counted as layers (5 + 1 + 1 places split 2 + 2 + 2 + 2: the first and last stages hold one layer).
TEST(PpTrain, FourStagesEvenAndUnevenMatchSingleRank) {
  if (world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  expect_same_curve(with_layers(gpt2_style(), 4), 1, false, pipelined(4));
  TrainConfig uneven = pipelined(4);
  uneven.pipeline.first_stage_layers = 1;
  uneven.pipeline.last_stage_layers = 1;
  expect_same_curve(with_layers(llama_style(), 6), 1, false, uneven);
  TrainConfig accounted = pipelined(4);
  accounted.pipeline.account_for_embedding = accounted.pipeline.account_for_loss = true;
  expect_same_curve(with_layers(gpt2_style(), 6), 1, false, accounted);
}

// Interleaved 1F1B: pp = 2 with v = 2 model chunks per rank (4 virtual stages of one layer), by
// either flag, with the micro-batch group size at its default (pp) and larger; on 4 ranks with
// dp = 2, the distributed optimizer and overlapped reduction.
TEST(PpTrain, InterleavedMatchesSingleRank) {
  TrainConfig run = pipelined(2);
  run.pipeline.virtual_stages_per_rank = 2;
  expect_same_curve(with_layers(gpt2_style(), 4), 1, false, run);
  TrainConfig grouped = pipelined(2);
  grouped.pipeline.layers_per_virtual_stage = 1;
  grouped.microbatch_group_size = 4;
  grouped.global_batch_size = 16;  // m >= the group size on 2 and 4 ranks
  grouped.use_distributed_optimizer = grouped.overlap_grad_reduce = true;
  grouped.ddp_bucket_size = 20000;
  expect_same_curve(with_layers(llama_style(), 4), 1, false, grouped);
}

// Stages with data parallelism under the distributed optimizer, overlapped gradient reduction
// and parameter gather (dp = 2 on 4 ranks); full recomputation inside each stage.
TEST(PpTrain, DistributedOptimizerOverlapAndRecomputationMatchSingleRank) {
  TrainConfig run = pipelined(2);
  run.use_distributed_optimizer = true;
  run.overlap_grad_reduce = true;
  run.overlap_param_gather = true;
  run.ddp_bucket_size = 20000;
  expect_same_curve(gpt2_style(), 1, false, run);
  ModelConfig full = llama_style();
  full.recompute_granularity = RecomputeGranularity::full;
  full.recompute_method = RecomputeMethod::uniform;
  full.recompute_num_layers = 1;
  expect_same_curve(full, 1, false, pipelined(2));
}

// tp × pp (× dp on 8 ranks) with sequence parallelism and the distributed optimizer.
TEST(PpTrain, TensorPipelineDataParallelMatchSingleRank) {
  if (world().size() < 4) GTEST_SKIP() << "needs 4 or 8 ranks";
  TrainConfig run = pipelined(2);
  run.use_distributed_optimizer = true;
  expect_same_curve(gpt2_style(), 2, true, run);
  expect_same_curve(llama_style(), 2, true, run);
}

// bf16 with f32 main parameters: stages hand on bf16 hidden states, as the layers keep them; the
// curve tracks one rank's to bf16 precision (see TpTrain.DistributedOptimizerBf16MatchesPlainDataParallel).
TEST(PpTrain, Bf16TracksSingleRank) {
  ModelConfig m = llama_style();
  m.params_dtype = DType::bf16;
  TrainConfig run = pipelined(2);
  run.loss_scale.bf16 = true;
  TrainConfig alone = run;
  alone.pipeline = PartitionConfig{};
  const TrainResult single = Trainer(m, alone).run([](const std::string&) {});
  const TrainResult staged = Trainer(m, run, &world()).run([](const std::string&) {});
  ASSERT_EQ(staged.iterations.size(), single.iterations.size());
  for (size_t i = 0; i < single.iterations.size(); ++i)
    EXPECT_NEAR(staged.iterations[i].loss, single.iterations[i].loss, 1e-3) << "iteration " << i + 1;
  EXPECT_LT(staged.iterations.back().loss, staged.iterations.front().loss - 0.3);
}

// fp16 with the initial loss scale 2^32: the first steps overflow. One decision for the whole
// pipeline (the norm, hence found_inf, is summed over the stages): the same skips and loss scales
// as one rank.
TEST(PpTrain, Fp16OverflowSkipsAgreeAcrossStages) { expect_same_overflow_skips(pipelined(2)); }

// The log's communication line: each stage sends one micro-batch's hidden states per forward
// (or gradient per backward) to its neighbour; the tied embedding is all-reduced once per step.
TEST(PpTrain, PipelineBytesPerStep) {
  TrainConfig run = pipelined(2);
  run.eval_iters = 0;
  Trainer trainer(gpt2_style(), run, &world());
  const int64_t m = trainer.config().num_microbatches_at(0);
  const IterationStats st = trainer.train_step();
  const Stage& stage = trainer.model();
  const double message = 4.0 * static_cast<double>(stage.hidden_shape().numel());  // f32
  const double embedding = 4.0 * 512 * 64;  // the tied word embedding [V, h]
  // 2 ranks in the embedding group: an all-reduce sends 2·(1/2) of the tensor; likewise the loss
  // and token count (two doubles) the last stage shares over pp.
  EXPECT_DOUBLE_EQ(st.pp_bytes_sent, static_cast<double>(m) * message + embedding + 16.0);
}

}  // namespace
}  // namespace mt::test
