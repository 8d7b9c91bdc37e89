// Checkpoints across layouts: a run under the job's parallel layout (tp, pp, dp and the
// distributed optimizer, by world size) saved at iteration 5 and resumed under the same layout
// reproduces the uninterrupted run bit for bit; loaded by each rank alone (tp = pp = dp = 1:
// every piece reassembled into whole tensors) it continues on the single-rank curve within
// rounding; and a single-rank checkpoint loads back into the parallel layout likewise. A run
// stopped by --exit-signal-handler saves once and resumes bit for bit. Context parallelism too.
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "train/checkpoint_convert.h"
#include "train/checkpoint_manifest.h"
#include "train_testing.h"

namespace mt::test {
namespace {

// One directory every rank of the job shares (named after rank 0's process and a count), removed
// at the end.
class SharedDir {
 public:
  SharedDir() {
    int32_t pid = static_cast<int32_t>(::getpid());
    world().broadcast(TensorView(&pid, DType::i32, {1}), 0);
    // Every rank makes its SharedDirs in the same order, so the counter names the same one.
    static int count = 0;
    path_ = (std::filesystem::temp_directory_path() / ("mt_ckpt_" + std::to_string(pid) + "_" + std::to_string(count++)))
                .string();
    world().barrier();
  }
  ~SharedDir() {
    world().barrier();
    if (world().rank() == 0) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The job's layout: 2 ranks tp 2; 4 ranks tp 2 x pp 2; 8 ranks tp 2 x pp 2 x dp 2 with the
// distributed optimizer.
void parallel_layout(ModelConfig& m, TrainConfig& run) {
  m.tensor_model_parallel_size = 2;
  m.sequence_parallel = true;
  if (world().size() >= 4) run.pipeline.pp = 2;
  run.use_distributed_optimizer = world().size() >= 8;
}

TrainConfig saving_run(const std::string& dir, int64_t iterations) {
  TrainConfig run = short_run();
  run.train_iters = iterations;
  run.checkpoint.save = dir;
  if (!dir.empty()) run.checkpoint.save_interval = 5;
  return run;
}

TrainConfig loading_run(const std::string& dir, int64_t iterations) {
  TrainConfig run = short_run();
  run.train_iters = iterations;
  run.checkpoint.load = dir;
  run.checkpoint.ckpt_step = 5;
  return run;
}

TEST(CheckpointLayouts, ParallelResumeIsBitExact) {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    SharedDir dir;
    ModelConfig m = llama_style();
    m.params_dtype = dtype;
    TrainConfig save = saving_run(dir.path(), 10), load = loading_run(dir.path(), 10);
    save.loss_scale.bf16 = load.loss_scale.bf16 = dtype == DType::bf16;
    parallel_layout(m, save);
    parallel_layout(m, load);
    const TrainResult whole = Trainer(m, save, &world()).run([](const std::string&) {});
    Trainer resumed(m, load, &world());
    ASSERT_EQ(resumed.load_checkpoint(dir.path()), 5);
    const TrainResult got = resumed.run([](const std::string&) {});
    ASSERT_EQ(got.iterations.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(got.iterations[i].loss, whole.iterations[i + 5].loss) << "iteration " << i + 6;
      EXPECT_EQ(got.iterations[i].grad_norm, whole.iterations[i + 5].grad_norm) << "iteration " << i + 6;
    }
  }
}

// --exit-signal-handler: SIGTERM on one rank mid-run (the last, as it writes iteration 4's log
// line) stops every rank after that iteration with one checkpoint, and the resume continues the
// uninterrupted run bit for bit.
TEST(CheckpointLayouts, SignalledRunSavesOnceAndResumesBitExact) {
  SharedDir dir;
  ModelConfig m = llama_style();
  TrainConfig signalled = saving_run(dir.path(), 10), whole = saving_run("", 10), load = loading_run(dir.path(), 10);
  signalled.checkpoint.save_interval = 0;  // the signal's is the only save
  signalled.exit_signal = SIGTERM;
  signalled.log_interval = 1;
  load.checkpoint.ckpt_step.reset();  // the latest
  for (TrainConfig* run : {&signalled, &whole, &load}) parallel_layout(m, *run);
  const TrainResult want = Trainer(m, whole, &world()).run([](const std::string&) {});
  const bool last = world().rank() == world().size() - 1;
  const TrainResult stopped = Trainer(m, signalled, &world()).run([last](const std::string& line) {
    if (last && line.find("iteration") != std::string::npos && line.find(" 4/") != std::string::npos) std::raise(SIGTERM);
  });
  EXPECT_TRUE(stopped.exited);
  ASSERT_EQ(stopped.iterations.size(), 4u);
  world().barrier();
  EXPECT_EQ(read_latest_iteration(dir.path()), std::optional<int64_t>(4));
  Trainer resumed(m, load, &world());
  ASSERT_EQ(resumed.load_checkpoint(dir.path()), 4);
  const TrainResult got = resumed.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(got.iterations[i].loss, want.iterations[i + 4].loss) << "iteration " << i + 5;
    EXPECT_EQ(got.iterations[i].grad_norm, want.iterations[i + 4].grad_norm) << "iteration " << i + 5;
  }
}

// Reshard both ways: the parallel layout's checkpoint continued by one rank, and one rank's
// checkpoint continued by the parallel layout, each against the uninterrupted single-rank run.
TEST(CheckpointLayouts, ReshardedRunsContinueTheSingleRankCurve) {
  SharedDir parallel_dir, single_dir;
  ModelConfig parallel_model = gpt2_style();
  TrainConfig parallel_save = saving_run(parallel_dir.path(), 10);  // the same LR schedule as the reference
  parallel_layout(parallel_model, parallel_save);
  Trainer(parallel_model, parallel_save, &world()).run([](const std::string&) {});
  // Rank 0 alone writes the single-rank run's checkpoint; every rank runs it for the reference.
  TrainConfig single = saving_run(world().rank() == 0 ? single_dir.path() : "", 10);
  const TrainResult want = Trainer(gpt2_style(), single).run([](const std::string&) {});
  world().barrier();

  Trainer alone(gpt2_style(), loading_run(parallel_dir.path(), 10));  // each rank by itself
  ASSERT_EQ(alone.load_checkpoint(parallel_dir.path()), 5);
  const TrainResult from_parallel = alone.run([](const std::string&) {});
  TrainConfig load = loading_run(single_dir.path(), 10);
  ModelConfig m = gpt2_style();
  parallel_layout(m, load);
  Trainer spread(m, load, &world());
  ASSERT_EQ(spread.load_checkpoint(single_dir.path()), 5);
  const TrainResult from_single = spread.run([](const std::string&) {});
  ASSERT_EQ(from_parallel.iterations.size(), 5u);
  ASSERT_EQ(from_single.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const double reference = want.iterations[i + 5].loss;
    EXPECT_NEAR(from_parallel.iterations[i].loss, reference, 1e-5 * reference) << "iteration " << i + 6;
    EXPECT_NEAR(from_single.iterations[i].loss, reference, 1e-5 * reference) << "iteration " << i + 6;
  }
}

// Context parallelism (4 ranks: cp 2 x tp 2 + sp, the distributed optimizer sharding its state over
// the two cp ranks): resumed bit for bit under the same layout, and loaded by each rank alone
// (cp 1, whole sequences) onto the single-rank curve.
TEST(CheckpointLayouts, ContextParallelResumesAndLoadsUnderCp1) {
  if (world().size() != 4) GTEST_SKIP() << "cp 2 x tp 2 needs 4 ranks";
  SharedDir dir;
  ModelConfig m = llama_style();
  m.tensor_model_parallel_size = 2;
  m.sequence_parallel = true;
  m.context_parallel_size = 2;
  TrainConfig save = saving_run(dir.path(), 10), load = loading_run(dir.path(), 10);
  save.use_distributed_optimizer = load.use_distributed_optimizer = true;
  const TrainResult whole = Trainer(m, save, &world()).run([](const std::string&) {});
  Trainer resumed(m, load, &world());
  ASSERT_EQ(resumed.load_checkpoint(dir.path()), 5);
  const TrainResult got = resumed.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got.iterations[i].loss, whole.iterations[i + 5].loss) << "iteration " << i + 6;
    EXPECT_EQ(got.iterations[i].grad_norm, whole.iterations[i + 5].grad_norm) << "iteration " << i + 6;
  }
  const TrainResult want = Trainer(llama_style(), saving_run("", 10)).run([](const std::string&) {});
  Trainer alone(llama_style(), loading_run(dir.path(), 10));
  ASSERT_EQ(alone.load_checkpoint(dir.path()), 5);
  const TrainResult from_cp = alone.run([](const std::string&) {});
  ASSERT_EQ(from_cp.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const double reference = want.iterations[i + 5].loss;
    EXPECT_NEAR(from_cp.iterations[i].loss, reference, 1e-5 * reference) << "iteration " << i + 6;
  }
}

// Two distributed-optimizer instances (dp 4): each state shard saved once (by the first instance),
// resumed bit for bit under the same layout, and loaded under one instance onto the same curve.
TEST(CheckpointLayouts, OptimizerInstancesResumeAndLoadUnderOne) {
  if (world().size() != 4) GTEST_SKIP();
  SharedDir dir;
  TrainConfig save = saving_run(dir.path(), 10), load = loading_run(dir.path(), 10);
  save.use_distributed_optimizer = load.use_distributed_optimizer = true;
  save.num_distributed_optimizer_instances = load.num_distributed_optimizer_instances = 2;
  const TrainResult whole = Trainer(gpt2_style(), save, &world()).run([](const std::string&) {});
  // dp ranks 2 and 3 (the second instance) hold copies of the first's state and save nothing;
  // dp rank 1 saves its state shard.
  const std::filesystem::path saved = committed_iteration_dir(dir.path(), 5);
  EXPECT_GT(std::filesystem::file_size(saved / shard_file_name(1)),
            std::filesystem::file_size(saved / shard_file_name(2)) + 10000);
  EXPECT_EQ(std::filesystem::file_size(saved / shard_file_name(2)),
            std::filesystem::file_size(saved / shard_file_name(3)));
  Trainer resumed(gpt2_style(), load, &world());
  ASSERT_EQ(resumed.load_checkpoint(dir.path()), 5);
  const TrainResult got = resumed.run([](const std::string&) {});
  load.num_distributed_optimizer_instances = 1;
  Trainer one(gpt2_style(), load, &world());
  ASSERT_EQ(one.load_checkpoint(dir.path()), 5);
  const TrainResult from_one = one.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), 5u);
  ASSERT_EQ(from_one.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got.iterations[i].loss, whole.iterations[i + 5].loss) << "iteration " << i + 6;
    EXPECT_EQ(got.iterations[i].grad_norm, whole.iterations[i + 5].grad_norm) << "iteration " << i + 6;
    const double reference = whole.iterations[i + 5].loss;
    EXPECT_NEAR(from_one.iterations[i].loss, reference, 1e-5 * reference) << "iteration " << i + 6;
  }
}

// An MoE model's expert shards: saved under expert parallelism (2 ranks: ep 2; 4 ranks: tp 2 + sp
// with experts split over ep 2 x etp 2, the distributed optimizer over dp and expert-dp) and resumed
// under the same layout bit for bit, and loaded by each rank alone onto the single-rank curve.
TEST(CheckpointLayouts, MoeExpertShardsResumeAndReshard) {
  if (world().size() != 2 && world().size() != 4) GTEST_SKIP();
  ModelConfig single = llama_style();
  single.num_layers = 2;
  single.moe.num_experts = 4;
  single.moe.ffn_hidden_size = 48;
  single.moe.aux_loss_coeff = 1e-2;
  single.moe.router.score_function = MoeScoreFunction::sigmoid;
  single.moe.expert_bias = true;
  single.moe.bias_update_rate = 1e-2f;
  single.moe.expert_tensor_parallel_size = 1;
  ModelConfig m = single;
  m.moe.expert_model_parallel_size = 2;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  SharedDir dir;
  TrainConfig save = saving_run(dir.path(), 10), load = loading_run(dir.path(), 10);
  if (world().size() == 4) {
    m.tensor_model_parallel_size = 2;
    m.sequence_parallel = true;
    m.moe.expert_tensor_parallel_size = 2;
    save.use_distributed_optimizer = load.use_distributed_optimizer = true;
  }
  const TrainResult whole = Trainer(m, save, &world()).run([](const std::string&) {});
  Trainer resumed(m, load, &world());
  ASSERT_EQ(resumed.load_checkpoint(dir.path()), 5);
  const TrainResult got = resumed.run([](const std::string&) {});
  const TrainResult want = Trainer(single, saving_run("", 10)).run([](const std::string&) {});
  Trainer alone(single, loading_run(dir.path(), 10));  // each rank by itself
  ASSERT_EQ(alone.load_checkpoint(dir.path()), 5);
  const TrainResult from_parallel = alone.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), 5u);
  ASSERT_EQ(from_parallel.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got.iterations[i].loss, whole.iterations[i + 5].loss) << "iteration " << i + 6;
    EXPECT_EQ(got.iterations[i].grad_norm, whole.iterations[i + 5].grad_norm) << "iteration " << i + 6;
    const double reference = want.iterations[i + 5].loss;
    EXPECT_NEAR(from_parallel.iterations[i].loss, reference, 1e-5 * reference) << "iteration " << i + 6;
  }
}

// `megatron convert`'s offline reshard: a single-rank checkpoint rewritten for the job's (tp, pp)
// loads under that layout exactly as the original does (the same whole tensors, so the same bits).
TEST(CheckpointLayouts, OfflineReshardedFilesLoadUnderTheirLayout) {
  SharedDir single_dir, resharded_dir;
  ModelConfig m = llama_style();
  m.params_dtype = DType::bf16;  // SwiGLU's split fc1, untied head, f32 main copies
  TrainConfig single = saving_run(world().rank() == 0 ? single_dir.path() : "", 5);
  single.loss_scale.bf16 = true;
  Trainer(m, single).run([](const std::string&) {});  // on every rank (rank 0 saves), as above
  if (world().rank() == 0) {
    ConvertOptions o;
    o.loader = o.saver = "megatron";
    o.load_dir = single_dir.path();
    o.save_dir = resharded_dir.path();
    o.target_tp = 2;
    o.target_pp = world().size() >= 4 ? 2 : 1;
    convert_checkpoint(o);
  }
  world().barrier();
  const auto resume = [&](const std::string& dir) {
    ModelConfig pm = m;
    TrainConfig load = loading_run(dir, 10);
    load.loss_scale.bf16 = true;
    load.checkpoint.schedule_on_resume = ScheduleOnResume::from_flags;  // saved by a 5-iteration run
    parallel_layout(pm, load);
    Trainer t(pm, load, &world());
    EXPECT_EQ(t.load_checkpoint(dir), 5);
    return t.run([](const std::string&) {});
  };
  const TrainResult want = resume(single_dir.path()), got = resume(resharded_dir.path());
  ASSERT_EQ(got.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got.iterations[i].loss, want.iterations[i].loss) << "iteration " << i + 6;
    EXPECT_EQ(got.iterations[i].grad_norm, want.iterations[i].grad_norm) << "iteration " << i + 6;
  }
}

// Issue 13's matrix on 8 ranks: a checkpoint of tp 2 x pp 2 x dp 2 (distributed optimizer)
// continued under (tp, pp, dp) = (1, 1, 1), (4, 1, 2), (1, 2, 4) with 2 chunks per rank, and
// (1, 4, 1) with 2 chunks per rank on 4 of the ranks, each within 1e-5 of the uninterrupted
// single-rank run for 10 iterations.
TEST(CheckpointLayouts, ReshardMatrixFrom2x2x2) {
  if (world().size() != 8) GTEST_SKIP() << "needs 8 ranks";
  ModelConfig base = llama_style();
  base.num_layers = 8;
  auto run_to = [](int64_t iterations) {
    TrainConfig run = short_run();
    run.global_batch_size = 16;
    run.train_iters = iterations;
    return run;
  };
  SharedDir dir;
  {
    ModelConfig m = base;
    m.tensor_model_parallel_size = 2;
    m.sequence_parallel = true;
    TrainConfig save = run_to(15);
    save.exit_interval = 5;  // the uninterrupted run's schedule; saves on exit
    save.checkpoint.save = dir.path();
    save.pipeline.pp = 2;
    save.use_distributed_optimizer = true;
    Trainer(m, save, &world()).run([](const std::string&) {});
  }
  const TrainResult want = Trainer(base, run_to(15)).run([](const std::string&) {});
  struct Layout {
    int64_t tp;
    int pp, v, ranks;
  };
  for (const Layout& l : {Layout{1, 1, 1, 1}, Layout{4, 1, 1, 8}, Layout{1, 2, 2, 8}, Layout{1, 4, 2, 4}}) {
    SCOPED_TRACE("tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp) + " v " + std::to_string(l.v) + " on " +
                 std::to_string(l.ranks) + " ranks");
    std::unique_ptr<Communicator> group = world().split(world().rank() < l.ranks ? 0 : 1, world().rank());
    if (world().rank() >= l.ranks) continue;
    ModelConfig m = base;
    m.tensor_model_parallel_size = l.tp;
    m.sequence_parallel = l.tp > 1;
    TrainConfig load = run_to(15);
    load.checkpoint.load = dir.path();
    load.pipeline.pp = l.pp;
    if (l.v > 1) load.pipeline.virtual_stages_per_rank = l.v;
    Trainer resumed(m, load, l.ranks > 1 ? group.get() : nullptr);
    ASSERT_EQ(resumed.load_checkpoint(dir.path()), 5);
    const TrainResult got = resumed.run([](const std::string&) {});
    ASSERT_EQ(got.iterations.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      const double reference = want.iterations[i + 5].loss;
      EXPECT_NEAR(got.iterations[i].loss, reference, 1e-5 * reference) << "iteration " << i + 6;
    }
  }
}

}  // namespace
}  // namespace mt::test
