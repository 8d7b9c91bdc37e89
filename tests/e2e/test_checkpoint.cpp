// Checkpoints on one rank: a run saved at iteration k and resumed reproduces the uninterrupted
// run bit for bit (losses, grad norms, final weights; f32 and bf16 with its f32 main copies,
// fp16 with its loss scale); --finetune and --no-load-optim take the weights alone; a truncated,
// corrupted or missing shard, a checkpoint of another model and a missing checkpoint are clear
// errors naming the file; an interrupted save leaves the previous checkpoint in place, and a save
// killed at any moment leaves one that resumes exactly.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "app/commands.h"
#include "ckpt/checkpoint_dir.h"
#include "testing.h"
#include "train/checkpoint_args.h"
#include "train/trainer.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

ModelConfig small_model(DType dtype = DType::f32) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 256;
  m.params_dtype = dtype;
  return m;  // dropout 0.1: the resumed run must draw the same masks
}

TrainConfig short_run(const std::string& save, int64_t iterations = 10) {
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = iterations;
  t.log_interval = 100;
  t.eval_iters = 0;
  t.seed = 7;
  t.schedule.lr = 2e-3;
  t.schedule.lr_warmup_iters = 2;
  t.schedule.lr_decay_style = "cosine";
  t.checkpoint.save = save;
  if (!save.empty()) t.checkpoint.save_interval = 5;
  return t;
}

TrainResult quiet_run(Trainer& t) { return t.run([](const std::string&) {}); }


void expect_exact_resume(const ModelConfig& m, TrainConfig run, const std::string& dir) {
  Trainer whole(m, run);
  const TrainResult want = quiet_run(whole);
  ASSERT_EQ(read_latest_iteration(dir), 10);
  TrainConfig resumed_run = run;
  resumed_run.checkpoint.load = dir;
  resumed_run.checkpoint.ckpt_step = 5;
  resumed_run.checkpoint.save.clear();
  resumed_run.checkpoint.save_interval = 0;
  Trainer resumed(m, resumed_run);
  ASSERT_EQ(resumed.load_checkpoint(dir), 5);
  EXPECT_EQ(resumed.iteration(), 5);
  const TrainResult got = quiet_run(resumed);
  ASSERT_EQ(got.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const IterationStats &a = got.iterations[i], &b = want.iterations[i + 5];
    EXPECT_EQ(a.iteration, b.iteration);
    EXPECT_EQ(a.loss, b.loss) << "iteration " << b.iteration;
    EXPECT_EQ(a.skipped, b.skipped) << "iteration " << b.iteration;
    if (!b.skipped) {
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "iteration " << b.iteration;
    }
    EXPECT_EQ(a.lr, b.lr) << "iteration " << b.iteration;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << "iteration " << b.iteration;
  }
  for (const Param& p : resumed.model().params().params()) {
    const Param& q = whole.model().params().get(p.name);
    EXPECT_EQ(std::memcmp(p.value.data, q.value.data, p.value.bytes()), 0) << p.name;
  }
}

TEST(Checkpoint, ResumeIsBitExact) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    test::TempDir dir;
    TrainConfig run = short_run(dir.path());
    run.loss_scale.bf16 = dtype == DType::bf16;
    run.loss_scale.fp16 = dtype == DType::f16;
    run.loss_scale.initial_loss_scale = 65536.0;  // fp16: some steps overflow, the scale must resume too
    expect_exact_resume(small_model(dtype), run, dir.path());
  }
}

// Under --step-batch-size-schedule (2 samples an iteration, 4 from sample 8, 6 from sample 16),
// saved at iteration 5, inside the second step (sample 12): the consumed samples decide the batch.
TEST(Checkpoint, ResumeInsideABatchScheduleIsBitExact) {
  test::TempDir dir;
  TrainConfig run = short_run(dir.path());
  run.global_batch_size = 0;
  run.step_batch_size_schedule = BatchSchedule::parse("0:2 8:4 16:6", 0);
  expect_exact_resume(small_model(), run, dir.path());
}

// Muon keeps one state per matrix, its momentum ("momentum_buffer"); Adam's moments the rest. A run
// saved with one optimizer does not load into the other (without --no-load-optim).
TEST(Checkpoint, MuonResumeIsBitExact) {
  test::TempDir dir;
  TrainConfig run = short_run(dir.path());
  run.loss_scale.bf16 = true;
  run.optimizer.muon = MuonConfig{};
  expect_exact_resume(small_model(DType::bf16), run, dir.path());
  TrainConfig adam = short_run("");
  adam.loss_scale.bf16 = true;
  adam.checkpoint.load = dir.path();
  Trainer other(small_model(DType::bf16), adam);
  EXPECT_TRUE(test::expect_error_mentioning([&] { other.load_checkpoint(dir.path()); },
                                            "it was saved with --optimizer muon"));
}

TEST(Checkpoint, FinetuneAndNoLoadOptimTakeTheWeightsAlone) {
  test::TempDir dir;
  Trainer saved(small_model(), short_run(dir.path()));
  quiet_run(saved);
  TrainConfig fine = short_run("");
  fine.checkpoint.finetune = true;
  Trainer tuned(small_model(), fine);
  tuned.load_checkpoint(dir.path());
  EXPECT_EQ(tuned.iteration(), 0);
  EXPECT_EQ(tuned.scheduler().num_steps(), 0);
  for (const Param& p : tuned.model().params().params())
    EXPECT_EQ(std::memcmp(p.value.data, saved.model().params().get(p.name).value.data, p.value.bytes()), 0) << p.name;
  // A weights-only checkpoint cannot restore an optimizer: say how to load it.
  test::TempDir weights;
  TrainConfig no_optim = short_run(weights.path());
  no_optim.checkpoint.no_save_optim = true;
  Trainer w(small_model(), no_optim);
  quiet_run(w);
  Trainer loader(small_model(), short_run(""));
  test::expect_error_mentioning([&] { loader.load_checkpoint(weights.path()); }, "--no-load-optim");
  TrainConfig no_load = short_run("");
  no_load.checkpoint.no_load_optim = true;
  Trainer ok(small_model(), no_load);
  EXPECT_EQ(ok.load_checkpoint(weights.path()), 10);
}

// A resume whose schedule flags differ from the checkpoint's (here a longer --train-iters, which
// moves the cosine decay) is refused with the difference named, as Megatron refuses it; the two
// flags say which schedule to follow.
TEST(Checkpoint, AChangedScheduleNeedsToBeChosen) {
  test::TempDir dir;
  Trainer whole(small_model(), short_run(dir.path()));
  const TrainResult want = quiet_run(whole);
  TrainConfig longer = short_run("", 14);
  longer.checkpoint.load = dir.path();
  longer.checkpoint.ckpt_step = 5;
  {
    Trainer refused(small_model(), longer);
    test::expect_error_mentioning([&] { refused.load_checkpoint(dir.path()); }, "lr_decay_steps");
  }
  // The checkpoint's schedule: iterations 6..10 as the uninterrupted run, bit for bit.
  longer.checkpoint.schedule_on_resume = ScheduleOnResume::from_checkpoint;
  Trainer continued(small_model(), longer);
  ASSERT_EQ(continued.load_checkpoint(dir.path()), 5);
  const TrainResult got = quiet_run(continued);
  ASSERT_EQ(got.iterations.size(), 9u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(got.iterations[i].lr, want.iterations[i + 5].lr) << "iteration " << i + 6;
    EXPECT_EQ(got.iterations[i].loss, want.iterations[i + 5].loss) << "iteration " << i + 6;
  }
  // The command line's: the 14-iteration cosine from where the checkpoint's count of samples stands.
  longer.checkpoint.schedule_on_resume = ScheduleOnResume::from_flags;
  Trainer overridden(small_model(), longer);
  ASSERT_EQ(overridden.load_checkpoint(dir.path()), 5);
  Trainer reference(small_model(), short_run("", 14));
  EXPECT_EQ(overridden.scheduler().config().lr_decay_steps, reference.scheduler().config().lr_decay_steps);
  EXPECT_EQ(overridden.scheduler().current_lr(), reference.scheduler().lr(5 * 4));
  EXPECT_NE(overridden.scheduler().current_lr(), continued.scheduler().lr(5 * 4));
}

// --save-retain-interval: each save removes the previous checkpoint unless its iteration is a
// multiple of the interval; the latest always stays.
TEST(Checkpoint, SaveRetainIntervalKeepsItsMultiplesAndTheLatest) {
  test::TempDir dir;
  TrainConfig run = short_run(dir.path(), 14);
  run.checkpoint.save_interval = 2;
  run.checkpoint.save_retain_interval = 6;
  Trainer trainer(small_model(), run);
  quiet_run(trainer);
  std::vector<int64_t> kept;
  for (int64_t i = 1; i <= 14; ++i)
    if (fs::exists(committed_iteration_dir(dir.path(), i))) kept.push_back(i);
  EXPECT_EQ(kept, (std::vector<int64_t>{6, 12, 14}));
  run.checkpoint.save_retain_interval = 3;  // not a multiple of --save-interval
  EXPECT_THROW(Trainer(small_model(), run), Error);
}

TEST(Checkpoint, BadCheckpointsAreClearErrors) {
  test::TempDir dir;
  Trainer saved(small_model(), short_run(dir.path()));
  quiet_run(saved);
  const std::string iter = iteration_dir(dir.path(), 10), shard = iter + "/rank_0.safetensors";
  auto load = [&] {
    Trainer t(small_model(), short_run(""));
    t.load_checkpoint(dir.path());
  };
  {  // another model
    ModelConfig other = small_model();
    other.hidden_size = 32;
    Trainer t(other, short_run(""));
    test::expect_error_mentioning([&] { t.load_checkpoint(dir.path()); }, "is of another model");
  }
  const std::string original = test::read_bytes(shard);
  // corrupted: one byte flipped
  std::string bad = original;
  bad[bad.size() / 2] ^= 0x40;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bad;
  test::expect_error_mentioning(load, "rank_0.safetensors is corrupted");
  // truncated
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << original.substr(0, original.size() - 100);
  test::expect_error_mentioning(load, "rank_0.safetensors holds");
  // missing
  fs::remove(shard);
  test::expect_error_mentioning(load, "rank_0.safetensors is missing");
  // no checkpoint at all
  test::TempDir empty;
  Trainer fresh(small_model(), short_run(""));
  EXPECT_EQ(fresh.load_checkpoint(empty.path()), -1);
  TrainConfig strict = short_run("");
  strict.checkpoint.exit_on_missing_checkpoint = true;
  Trainer t(small_model(), strict);
  test::expect_error_mentioning([&] { t.load_checkpoint(empty.path()); }, "--exit-on-missing-checkpoint");
}

// An MoE model resumes exactly too (its router, experts and shared expert are parameters like
// any other), and its checkpoint records the expert layout and the routing for
// --use-checkpoint-args.
TEST(Checkpoint, MoeResumeIsBitExactAndRecordsTheRouting) {
  test::TempDir dir;
  ModelConfig m = small_model(DType::bf16);
  m.add_bias_linear = false;
  m.moe.num_experts = 4;
  m.moe.layer_freq = "[0,1]";
  m.moe.ffn_hidden_size = 48;
  m.moe.shared_expert_intermediate_size = 32;
  m.moe.router.topk = 2;
  m.moe.capacity.capacity_factor = 1.5;
  m.moe.capacity.drop_policy = MoeDropPolicy::position;
  m.moe.aux_loss_coeff = 1e-2;
  m.moe.z_loss_coeff = 1e-3;
  // Aux-loss-free balancing: the biases steer the routing, so the resumed run must restore them.
  m.moe.router.score_function = MoeScoreFunction::sigmoid;
  m.moe.expert_bias = true;
  m.moe.bias_update_rate = 1e-2f;
  TrainConfig run = short_run(dir.path());
  run.loss_scale.bf16 = true;
  expect_exact_resume(m, run, dir.path());
  ModelConfig read = small_model();
  apply_checkpoint_args(dir.path(), 5, read);
  read.finalize();
  EXPECT_EQ(read.moe.num_experts, 4);
  EXPECT_EQ(read.mlp_kind(0), MlpKind::dense);
  EXPECT_EQ(read.mlp_kind(1), MlpKind::moe);
  EXPECT_EQ(read.moe.ffn_hidden_size, 48);
  EXPECT_EQ(read.moe.shared_expert_intermediate_size, 32);
  EXPECT_EQ(read.moe.capacity.capacity_factor.value_or(0.0), 1.5);
  EXPECT_EQ(read.moe.capacity.drop_policy, MoeDropPolicy::position);
}

// `megatron train --load DIR --use-checkpoint-args`: the architecture comes from the checkpoint
// (the flags' defaults describe another model, which alone would be refused).
TEST(Checkpoint, UseCheckpointArgsTakesTheModelFromTheCheckpoint) {
  test::TempDir dir;
  ModelConfig m = small_model();
  m.normalization = Normalization::rmsnorm;
  m.activation = Activation::swiglu;
  Trainer saved(m, short_run(dir.path()));
  quiet_run(saved);
  const std::vector<std::string> args = {"--mock-data", "--micro-batch-size", "2", "--global-batch-size", "4",
                                         "--seq-length", "32", "--vocab-size", "512", "--lr", "1e-3", "--train-iters", "12",
                                         "--eval-iters", "0", "--log-interval", "1", "--load", dir.path(),
                                         "--override-opt_param-scheduler"};
  ::testing::internal::CaptureStdout();
  test::expect_error_mentioning([&] { cmd_train(args); }, "is of another model");
  ::testing::internal::GetCapturedStdout();
  std::vector<std::string> with_args = args;
  with_args.push_back("--use-checkpoint-args");
  ::testing::internal::CaptureStdout();
  const int rc = cmd_train(with_args);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("RMSNorm"), std::string::npos) << out;
  EXPECT_NE(out.find("successfully loaded checkpoint"), std::string::npos) << out;
  EXPECT_NE(out.find("iteration       12/      12"), std::string::npos) << out;
}

// A save interrupted before its commit leaves its staging directory behind and "latest" naming
// the previous checkpoint, which still loads; the next save clears the leftover.
TEST(Checkpoint, InterruptedSaveLeavesThePreviousCheckpoint) {
  test::TempDir dir;
  Trainer saved(small_model(), short_run(dir.path()));
  quiet_run(saved);
  const std::string partial = begin_checkpoint(dir.path(), 15);
  std::ofstream(partial + "/rank_0.safetensors") << "half a file";
  EXPECT_EQ(read_latest_iteration(dir.path()), 10);
  Trainer t(small_model(), short_run(""));
  EXPECT_EQ(t.load_checkpoint(dir.path()), 10);
  EXPECT_TRUE(fs::exists(partial));
  begin_checkpoint(dir.path(), 15);
  EXPECT_TRUE(fs::is_empty(partial));
}

// A re-save of the same iteration interrupted after setting the old directory aside and before
// renaming the new one into place: "latest" names an iteration whose directory is <dir>.old.
TEST(Checkpoint, InterruptedResaveStillLoadsTheOldDirectory) {
  test::TempDir dir;
  Trainer saved(small_model(), short_run(dir.path()));
  quiet_run(saved);
  const std::string final_dir = iteration_dir(dir.path(), 10);
  fs::rename(final_dir, final_dir + ".old");
  Trainer t(small_model(), short_run(""));
  EXPECT_EQ(t.load_checkpoint(dir.path()), 10);
  // The next save of that iteration puts a whole directory back and drops the old one.
  t.save_checkpoint(dir.path());
  EXPECT_TRUE(fs::exists(final_dir + "/manifest.json"));
  EXPECT_FALSE(fs::exists(final_dir + ".old"));
}

// Crash safety: a process killed (SIGKILL) at any moment of a save leaves a checkpoint that loads
// and resumes bit for bit (bf16: values, f32 main copies and moments all in it). After iteration 5 is saved, the trainer takes one more step; a forked
// child then saves iteration 6 over and over (the first save a new iteration, the rest re-saves of
// it); the parent kills it after a delay spread over about six saves, many times, and each time
// loads whatever "latest" names and checks that training continues exactly as the uninterrupted
// run does.
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
  const TrainResult reference = Trainer(small_model(DType::bf16), run_to(last, "")).run([](const std::string&) {});
  TrainConfig stopping = run_to(last, dir.path());
  stopping.exit_interval = first;  // the same schedule as the reference; saves on exit
  Trainer trained(small_model(DType::bf16), stopping);
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
    Trainer resumed(small_model(DType::bf16), run_to(last, "", dir.path()));
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
