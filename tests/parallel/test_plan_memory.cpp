// plan/'s memory against real runs: the model-state bytes of the distributed optimizer's shard,
// and every rank's planned totals against the memory tracker's peaks after training steps, over
// tp/pp/dp layouts with and without the distributed optimizer and recomputation, in fp32 and bf16.
#include "model/stage.h"
#include "optim/optimizer.h"
#include "parallel_testing.h"
#include "plan/memory_plan.h"
#include "plan/model_state.h"
#include "train_testing.h"

namespace mt::test {
namespace {

TEST(PlanMemory, TheDistributedOptimizersShardIsTheFormulas) {
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const bool overlap : {false, true}) {
      ModelConfig c;
      c.num_layers = 2;
      c.hidden_size = 40;
      c.num_attention_heads = 4;
      c.seq_length = 8;
      c.vocab_size = 70;
      c.params_dtype = dtype;
      c.finalize();
      MemoryTracker memory;
      StageOptions options;
      options.slots = 1;
      options.ddp.data_parallel_size = world().size();
      options.ddp.use_distributed_optimizer = true;
      options.ddp.overlap_grad_reduce = overlap;
      options.ddp.bucket_size = overlap ? 4000 : 0;  // several buckets, each padded
      const StageRange range{0, 2, true, true};
      Stage stage(c, range, 1, cpu_backend(), &memory, options);
      AdamW adam({{&stage.params().params(), {&stage.params().layout(), &world()}}}, cpu_backend(), &memory);
      const ModelStateBytes expected = model_state_bytes(c, range, options.ddp);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::weights)), expected.weights);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::grads)), expected.grads);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::optimizer)), expected.optimizer);
    }
}

struct Layout {
  const char* name;
  int tp = 1, pp = 1, vp = 1;
  bool sp = false, distributed = false, bf16 = false;
  RecomputeGranularity recompute = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
};

// Each layout trains two steps (with an evaluation) on the whole job; the tracker's peaks on
// every rank, category by category and in total, must be plan's figures for that rank's pipeline
// stage to the byte (both count the tensors' own bytes, not the arenas' alignment padding).
TEST(PlanMemory, EveryRanksTotalsMatchTheTrackersPeaks) {
  const Layout layouts[] = {
      {"tp 2 + dp, fp32", 2},
      {"tp 2 + sp, bf16, selective recompute", 2, 1, 1, true, false, true, RecomputeGranularity::selective},
      {"pp 2 + dp, distributed optimizer, bf16", 1, 2, 1, false, true, true},
      {"pp 2 + dp, full uniform recompute, fp32", 1, 2, 1, false, false, false, RecomputeGranularity::full},
      {"pp 2 interleaved (v 2), distributed optimizer, fp32", 1, 2, 2, false, true},
      {"tp 2 + pp 2, sp, full block recompute, bf16", 2, 2, 1, true, false, true, RecomputeGranularity::full,
       RecomputeMethod::block},
      {"dp only, distributed optimizer, bf16", 1, 1, 1, false, true, true},
      {"pp 4, selective recompute, fp32", 1, 4, 1, false, false, false, RecomputeGranularity::selective},
  };
  int tested = 0;
  for (const Layout& l : layouts) {
    if (world().size() % (l.tp * l.pp) != 0) continue;
    SCOPED_TRACE(std::string(l.name) + " on " + std::to_string(world().size()) + " ranks");
    ModelConfig m = llama_style();
    m.num_layers = 4;
    m.seq_length = 24;  // with b = 1, sizes that are not all multiples of the arenas' alignment
    m.tensor_model_parallel_size = l.tp;
    m.sequence_parallel = l.sp;
    m.recompute_granularity = l.recompute;
    m.recompute_method = l.method;
    m.recompute_num_layers = l.method == RecomputeMethod::block ? 1 : 2;
    m.attention_impl = l.recompute == RecomputeGranularity::selective ? AttentionImpl::flash : AttentionImpl::unfused;
    if (l.bf16) m.params_dtype = DType::bf16;
    TrainConfig run = short_run();
    run.train_iters = 2;
    run.micro_batch_size = 1;
    run.schedule.lr_warmup_iters = 1;
    run.eval_interval = 2;
    run.eval_iters = 1;
    run.pipeline.pp = l.pp;
    if (l.vp > 1) run.pipeline.virtual_stages_per_rank = l.vp;
    run.use_distributed_optimizer = l.distributed;
    run.loss_scale.bf16 = l.bf16;
    Trainer trainer(m, run, &world());
    (void)trainer.run([](const std::string&) {});
    const std::vector<PipelineRankMemory> plan =
        plan_memory(training_layout(m, run, world().size(), cpu_backend().max_threads()));
    const int pp_rank = trainer.groups().grid.dense_coords(world().rank()).pp;
    const RankMemory& want = plan.at(static_cast<size_t>(pp_rank)).total;
    const MemoryTracker& got = trainer.memory();
    auto measured = [&](MemCategory c) { return static_cast<int64_t>(got.peak(c)); };
    const std::pair<MemCategory, int64_t> planned[] = {
        {MemCategory::weights, want.weights},         {MemCategory::grads, want.grads},
        {MemCategory::optimizer, want.optimizer},     {MemCategory::activations, want.activations},
        {MemCategory::workspace, want.workspace},     {MemCategory::comm, want.comm}};
    for (const auto& [category, bytes] : planned) EXPECT_EQ(measured(category), bytes) << mem_category_name(category);
    EXPECT_EQ(static_cast<int64_t>(got.peak_total()), want.peak());
    ++tested;
  }
  EXPECT_GE(tested, world().size() == 4 ? 8 : 5);
}

}  // namespace
}  // namespace mt::test
