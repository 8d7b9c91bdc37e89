// Checkpoints across layouts: a run under the job's parallel layout (tp, pp, dp and the
// distributed optimizer, by world size) saved at iteration 5 and resumed under the same layout
// reproduces the uninterrupted run bit for bit; loaded by each rank alone (tp = pp = dp = 1:
// every piece reassembled into whole tensors) it continues on the single-rank curve within
// rounding; and a single-rank checkpoint loads back into the parallel layout likewise.
#include <unistd.h>

#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "train_testing.h"

namespace mt::test {
namespace {

// One directory every rank of the job shares (named after rank 0's process), removed at the end.
class SharedDir {
 public:
  SharedDir() {
    int32_t pid = static_cast<int32_t>(::getpid());
    world().broadcast(TensorView(&pid, DType::i32, {1}), 0);
    path_ = (std::filesystem::temp_directory_path() / ("mt_ckpt_" + std::to_string(pid))).string();
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

// Reshard both ways: the parallel layout's checkpoint continued by one rank, and one rank's
// checkpoint continued by the parallel layout, each against the uninterrupted single-rank run.
TEST(CheckpointLayouts, ReshardedRunsContinueTheSingleRankCurve) {
  SharedDir parallel_dir, single_dir;
  ModelConfig parallel_model = gpt2_style();
  TrainConfig parallel_save = saving_run(parallel_dir.path(), 5);
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

}  // namespace
}  // namespace mt::test
