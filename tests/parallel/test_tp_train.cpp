// End to end: with the same seed, training under tensor parallelism (t = the job's size), with
// and without sequence parallelism, and under data parallelism, reproduces the single-rank loss
// curve over 20 iterations with dropout on, for a GPT-2-style and a Llama-style model (GQA,
// SwiGLU, RoPE). Weights and dropout masks are drawn by whole-tensor index, so the layouts differ
// only in the order of floating-point reductions: the tolerance is 2e-5 on a loss of ~6
// (measured differences are ~1e-6).
#include <numeric>

#include "train_testing.h"

namespace mt::test {
namespace {

TEST(TpTrain, Gpt2StyleTensorParallelMatchesSingleRank) { expect_same_curve(gpt2_style(), world().size(), false); }
TEST(TpTrain, Gpt2StyleSequenceParallelMatchesSingleRank) { expect_same_curve(gpt2_style(), world().size(), true); }
TEST(TpTrain, LlamaStyleTensorParallelMatchesSingleRank) { expect_same_curve(llama_style(), world().size(), false); }
TEST(TpTrain, LlamaStyleSequenceParallelMatchesSingleRank) { expect_same_curve(llama_style(), world().size(), true); }
// Packed documents (--reset-position-ids --reset-attention-mask): every rank takes the whole
// [b, s] positions and document starts (the embedding and RoPE run on all tokens, attention on
// the full sequence of its heads). Sequences of 64 so that some samples hold an EOD.
// --qk-layernorm: each rank normalises its own heads with the whole q/k norm weights, whose
// partial gradients are summed over tp (Megatron's finalize_model_grads does the same); RMSNorm
// with RoPE, with and without sp, and LayerNorm with its biases.
TEST(TpTrain, QkLayernormMatchesSingleRank) {
  ModelConfig llama = llama_style(), gpt2 = gpt2_style();
  llama.qk_layernorm = gpt2.qk_layernorm = true;
  expect_same_curve(llama, world().size(), false);
  expect_same_curve(llama, world().size(), true);
  expect_same_curve(gpt2, world().size(), true);
}

TEST(TpTrain, DocumentMasksMatchSingleRank) {
  TrainConfig run = short_run();
  run.reset_position_ids = run.reset_attention_mask = true;
  for (ModelConfig m : {gpt2_style(), llama_style()}) {
    m.seq_length = 64;
    expect_same_curve(m, world().size(), m.position_embedding_type == PositionEmbedding::rope, run);
  }
  // The flags change this run (some of its samples hold an EOD), or the check above proves little.
  ModelConfig m = llama_style();
  m.seq_length = 64;
  TrainConfig plain = run;
  plain.train_iters = 5;
  plain.reset_position_ids = plain.reset_attention_mask = false;
  TrainConfig reset = run;
  reset.train_iters = 5;
  const TrainResult a = Trainer(m, plain).run([](const std::string&) {});
  const TrainResult b = Trainer(m, reset).run([](const std::string&) {});
  double most = 0.0;
  for (size_t i = 0; i < a.iterations.size(); ++i)
    most = std::max(most, std::fabs(a.iterations[i].loss - b.iterations[i].loss));
  EXPECT_GT(most, 1e-5);
}
// Recomputation reruns sharded GEMMs and their collectives in the backward (full: whole layers up
// to fc1; selective mlp: fc1 and its sequence-parallel all-gather). On one rank it changes no bit
// (tests/e2e/test_recompute.cpp), so matching the single-rank curve here covers both.
TEST(TpTrain, RecomputationUnderSequenceParallelMatchesSingleRank) {
  ModelConfig full = gpt2_style();
  full.recompute_granularity = RecomputeGranularity::full;
  full.recompute_method = RecomputeMethod::uniform;
  full.recompute_num_layers = 1;
  expect_same_curve(full, world().size(), true);
  ModelConfig mlp = llama_style();
  mlp.recompute_granularity = RecomputeGranularity::selective;
  mlp.recompute_mlp = true;
  expect_same_curve(mlp, world().size(), true);
}
// Data parallelism (plain gradient all-reduce): tp = 1, and tp = 2 beside it on 4 ranks.
TEST(TpTrain, DataParallelMatchesSingleRank) {
  expect_same_curve(llama_style(), 1, false);
  if (world().size() == 4) expect_same_curve(gpt2_style(), 2, true);
}
// The distributed optimizer: each dp rank updates its shard of every bucket, the gradients
// reduce-scattered and the updated values all-gathered; tp = 2 beside dp on 4 ranks.
TEST(TpTrain, DistributedOptimizerMatchesSingleRank) {
  TrainConfig run = short_run();
  run.use_distributed_optimizer = true;
  expect_same_curve(gpt2_style(), 1, false, run);
  if (world().size() == 4) expect_same_curve(llama_style(), 2, true, run);
}
// --num-distributed-optimizer-instances 2: the state sharded within each half of dp, each shard's
// gradients then all-reduced across the halves: dp 2 (instances of one rank) or 4, and on 4 ranks
// tp 2 x dp 2 with overlapped bucket reductions and parameter gathers.
TEST(TpTrain, DistributedOptimizerInstancesMatchSingleRank) {
  TrainConfig run = short_run();
  run.use_distributed_optimizer = true;
  run.num_distributed_optimizer_instances = 2;
  expect_same_curve(gpt2_style(), 1, false, run);
  if (world().size() != 4) return;
  run.overlap_grad_reduce = run.overlap_param_gather = true;
  run.ddp_bucket_size = 20000;
  expect_same_curve(llama_style(), 2, true, run);
}
// --overlap-grad-reduce with small buckets (several per model): each bucket's non-blocking
// reduction starts inside the last micro-batch's backward; plain and distributed, and tp 2 x dp 2.
TEST(TpTrain, OverlappedBucketReductionMatchesSingleRank) {
  TrainConfig run = short_run();
  run.overlap_grad_reduce = true;
  run.ddp_bucket_size = 20000;
  expect_same_curve(llama_style(), 1, false, run);
  run.use_distributed_optimizer = true;
  expect_same_curve(gpt2_style(), 1, false, run);
  if (world().size() == 4) expect_same_curve(llama_style(), 2, true, run);
}
// --overlap-param-gather: the updated shards' all-gathers start after the step and the next
// forward waits for each bucket only when it reaches it (evaluation too); tp 2 x dp 2 on 4 ranks.
TEST(TpTrain, OverlappedParameterGatherMatchesSingleRank) {
  TrainConfig run = short_run();
  run.overlap_grad_reduce = true;
  run.ddp_bucket_size = 20000;
  run.use_distributed_optimizer = true;
  run.overlap_param_gather = true;
  run.eval_interval = 10;
  run.eval_iters = 1;
  expect_same_curve(gpt2_style(), 1, false, run);
  if (world().size() == 4) expect_same_curve(llama_style(), 2, true, run);
}
// --ddp-average-in-collective: no 1/dp in the gradient scale, the reduction averages instead.
TEST(TpTrain, AverageInCollectiveMatchesSingleRank) {
  TrainConfig run = short_run();
  run.ddp_average_in_collective = true;
  expect_same_curve(llama_style(), 1, false, run);
  run.use_distributed_optimizer = true;
  run.overlap_grad_reduce = true;
  run.ddp_bucket_size = 20000;
  expect_same_curve(gpt2_style(), 1, false, run);
}
// The bytes each rank sends over dp in one step (the trainer's counted dp group): one reduction of
// the gradient buffer per global batch however many micro-batches it holds (3 here), bucket by
// bucket; under the distributed optimizer a reduce-scatter of the gradients plus an all-gather of
// the values. Besides them only scalars (loss sums, norm pieces) cross dp.
TEST(TpTrain, DataParallelBytesPerStep) {
  const int d = world().size();
  for (const bool distributed : {false, true})
    for (const bool overlap : {false, true}) {
      SCOPED_TRACE(std::string(distributed ? "distributed optimizer" : "plain DDP") + (overlap ? ", overlap" : ""));
      TrainConfig run = short_run();
      run.global_batch_size = run.micro_batch_size * d * 3;
      run.train_iters = 2;
      run.schedule.lr_warmup_iters = 0;
      run.use_distributed_optimizer = distributed;
      run.overlap_grad_reduce = overlap;
      run.overlap_param_gather = overlap && distributed;
      if (overlap) run.ddp_bucket_size = 20000;
      Trainer trainer(llama_style(), run, &world());
      ASSERT_EQ(trainer.config().num_microbatches_at(0), 3);
      auto* dp = dynamic_cast<CountingCommunicator*>(trainer.groups().dp_cp.get());  // the gradients' group
      ASSERT_NE(dp, nullptr);
      const CommTotals before = dp->totals();
      const IterationStats st = trainer.train_step();
      const CommTotals step = dp->totals() - before;
      const DdpBufferLayout& layout = trainer.model().params().layout();
      const size_t buffer = static_cast<size_t>(layout.numel) * 4, buckets = layout.buckets.size();
      EXPECT_EQ(buckets > 1, overlap);
      // A few doubles (loss sums, norm pieces) besides the buffer: not m = 3 reductions of it.
      const size_t scalars = step.all_reduce.bytes - (distributed ? 0 : buffer);
      EXPECT_LE(scalars, 64u);
      const size_t scalar_calls = step.all_reduce.calls - (distributed ? 0 : buckets);
      EXPECT_GE(scalar_calls, 1u);
      EXPECT_LE(scalar_calls, 3u);
      EXPECT_EQ(step.reduce_scatter.bytes, distributed ? buffer : 0u);
      EXPECT_EQ(step.reduce_scatter.calls, distributed ? buckets : 0u);
      // Overlapped gathers are started by the step and counted there (the next forward waits).
      EXPECT_EQ(step.all_gather.bytes, distributed ? buffer : 0u);
      EXPECT_EQ(step.all_gather.calls, distributed ? buckets : 0u);
      EXPECT_EQ(step.send.calls + step.broadcast.calls, 0u);
      // Ring algorithms: 2(d-1)/d of an all-reduce, (d-1)/d of a reduce-scatter or all-gather.
      const double others = double(d - 1) / d;
      EXPECT_DOUBLE_EQ(st.dp_bytes_sent, 2.0 * others * double(buffer + scalars));
    }
}

// bf16 (f32 main copies of each shard): 16-bit parameters turn the ulp-level differences of the
// main copies (each layout sums gradients in its own order: one rank over its micro-batches, an
// all-reduce and a reduce-scatter over ranks in MPI's orders) into whole bf16 steps, so bf16
// curves of different layouts agree to ~1e-4 (measured: plain dp 2 = distributed optimizer dp 2
// to 1e-8, dp 4 differs by 9e-5; both differ from one rank by ~1e-4), not to fp32's 1e-8. A
// broken shard (a part not updated, not gathered, or a stale main copy) shows at 1e-2 and more.
TEST(TpTrain, DistributedOptimizerBf16MatchesPlainDataParallel) {
  ModelConfig m = llama_style();
  m.params_dtype = DType::bf16;
  TrainConfig run = short_run();
  run.loss_scale.bf16 = true;
  const TrainResult single = Trainer(m, run).run([](const std::string&) {});
  const TrainResult plain = Trainer(m, run, &world()).run([](const std::string&) {});
  run.use_distributed_optimizer = true;
  const TrainResult sharded = Trainer(m, run, &world()).run([](const std::string&) {});
  ASSERT_EQ(sharded.iterations.size(), plain.iterations.size());
  for (size_t i = 0; i < plain.iterations.size(); ++i) {
    const IterationStats &a = sharded.iterations[i], &b = plain.iterations[i];
    EXPECT_NEAR(a.loss, b.loss, 1e-3) << "iteration " << i + 1;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-2 * b.grad_norm) << "iteration " << i + 1;
    EXPECT_NEAR(a.loss, single.iterations[i].loss, 1e-3) << "iteration " << i + 1;
  }
  EXPECT_LT(sharded.iterations.back().loss, sharded.iterations.front().loss - 0.3);
}

// fp16 with Megatron's initial loss scale 2^32: the first steps overflow and are skipped. Under the
// distributed optimizer no rank sees every gradient, yet all must skip the same steps (the norm,
// hence found_inf, is reduced over dp): the same skips and scales as one rank, and a curve that
// tracks it to fp16's precision.
TEST(TpTrain, Fp16OverflowSkipsAgreeUnderTheDistributedOptimizer) {
  TrainConfig run = short_run();
  run.use_distributed_optimizer = true;
  expect_same_overflow_skips(run);
}

// Optimizer state per rank under the distributed optimizer: Adam's two moments (and the f32
// main copy of 16-bit parameters) for 1/dp of the padded gradient buffer, as Megatron's
// bytes-per-parameter formula says (fp32 8 + 8/d, bf16 6 + 12/d): exactly, padding included.
TEST(TpTrain, DistributedOptimizerStateShrinksWithDataParallelSize) {
  const int d = world().size();
  for (DType dtype : {DType::f32, DType::bf16}) {
    ModelConfig m = llama_style();
    m.params_dtype = dtype;
    TrainConfig run = short_run();
    run.train_iters = 1;
    run.schedule.lr_warmup_iters = 0;
    run.loss_scale.bf16 = dtype == DType::bf16;
    run.use_distributed_optimizer = true;
    Trainer sharded(m, run, &world());
    run.use_distributed_optimizer = false;
    Trainer whole(m, run, &world());
    const DdpBufferLayout& layout = sharded.model().params().layout();
    EXPECT_EQ(layout.numel % std::lcm(d, 128), 0);  // every bucket splits into d equal shards
    const size_t state_arrays = dtype == DType::f32 ? 2 : 3;
    EXPECT_EQ(sharded.memory().peak(MemCategory::optimizer), state_arrays * 4 * static_cast<size_t>(layout.numel / d));
    EXPECT_EQ(whole.memory().peak(MemCategory::optimizer),
              state_arrays * 4 * static_cast<size_t>(whole.model().params().numel()));
    // Weights and gradients stay whole on every rank (ZeRO-1).
    EXPECT_EQ(sharded.memory().peak(MemCategory::grads), 4 * static_cast<size_t>(layout.numel));
  }
}

// --check-weight-hash-across-dp-replicas-interval: the data-parallel replicas of a run agree,
// and a replica whose weights drifted stops the job on every rank with the reason.
TEST(TpTrain, ReplicaWeightHashesAgreeAndCatchADrift) {
  TrainConfig run = short_run();
  run.train_iters = 2;
  run.schedule.lr_warmup_iters = 1;
  run.check_weight_hash_interval = 1;
  Trainer trainer(gpt2_style(), run, &world());  // tp 1: every rank a data-parallel replica
  std::string log;
  trainer.run([&](const std::string& line) { log += line + "\n"; });
  EXPECT_NE(log.find(">>> Weight hashes match after 2 iterations..."), std::string::npos) << log;
  if (world().rank() == world().size() - 1) trainer.model().params().params().front().value.f32()[0] += 1.0f;
  EXPECT_THROW(trainer.check_weights_match_across_replicas(), Error);
}

}  // namespace
}  // namespace mt::test
