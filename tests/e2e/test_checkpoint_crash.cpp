// Crash safety: a process killed (SIGKILL) at any moment of a save leaves a checkpoint that loads
// and resumes bit for bit. After iteration 5 is saved, the trainer takes one more step; a forked
// child then saves iteration 6 over and over (the first save a new iteration, the rest re-saves of
// it); the parent kills it after a delay spread over about six saves, many times, and each time
// loads whatever "latest" names and checks that training continues exactly as the uninterrupted
// run does.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "ckpt/checkpoint_dir.h"
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 256;
  m.params_dtype = DType::bf16;  // values, f32 main copies and moments all in the checkpoint
  return m;
}

TrainConfig run_to(int64_t iterations, const std::string& save, const std::string& load = "") {
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = iterations;
  t.log_interval = 100;
  t.eval_iters = 0;
  t.schedule.lr = 2e-3;
  t.loss_scale.bf16 = true;
  t.checkpoint.save = save;
  t.checkpoint.load = load;
  return t;
}

TEST(CheckpointCrash, KilledSavesAlwaysLeaveALoadableCheckpoint) {
  test::TempDir dir;
  const int64_t first = 5, last = 8;
  const TrainResult reference = Trainer(small_model(), run_to(last, "")).run([](const std::string&) {});
  TrainConfig stopping = run_to(last, dir.path());
  stopping.exit_interval = first;  // the same schedule as the reference; saves on exit
  Trainer trained(small_model(), stopping);
  trained.run([](const std::string&) {});
  ASSERT_EQ(read_latest_iteration(dir.path()), first);
  // How long a few saves take, to spread the kills over.
  const auto start = std::chrono::steady_clock::now();
  trained.save_checkpoint(dir.path());
  trained.save_checkpoint(dir.path());
  const double work_us = 3.0 * std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  trained.train_step();  // iteration 6, which the children save

  const int trials = 40;
  int resumed_exactly = 0, at_first = 0, at_second = 0;
  for (int k = 0; k < trials; ++k) {
    std::fflush(nullptr);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0)  // save iteration 6 until killed (file work only: no compute threads after fork)
      for (;;) trained.save_checkpoint(dir.path());
    ::usleep(static_cast<useconds_t>(work_us * (k + 0.5) / trials));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    Trainer resumed(small_model(), run_to(last, "", dir.path()));
    const int64_t loaded = resumed.load_checkpoint(dir.path());
    ASSERT_TRUE(loaded == first || loaded == first + 1) << "trial " << k << ": loaded iteration " << loaded;
    (loaded == first ? at_first : at_second) += 1;
    const TrainResult got = resumed.run([](const std::string&) {});
    bool exact = got.iterations.size() == static_cast<size_t>(last - loaded);
    for (size_t i = 0; exact && i < got.iterations.size(); ++i)
      exact = got.iterations[i].loss == reference.iterations[static_cast<size_t>(loaded) + i].loss;
    EXPECT_TRUE(exact) << "trial " << k << " (kill after " << work_us * (k + 0.5) / trials << " us)";
    resumed_exactly += exact;
  }
  std::printf("    killed saves: %d/%d resumed exactly (%d from iteration %lld, %d from %lld)\n", resumed_exactly,
              trials, at_first, static_cast<long long>(first), at_second, static_cast<long long>(first + 1));
  // The kills must land on both sides of the new checkpoint's commit, or the test proves little.
  EXPECT_GT(at_first, 0);
  EXPECT_GT(at_second, 0);
}

}  // namespace
}  // namespace mt
