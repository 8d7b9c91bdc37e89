// End to end: a run under --step-batch-size-schedule reads each iteration's batch where the
// schedule puts it, logs that batch as Megatron's "global batch size", saves a checkpoint when the
// micro-batch count changes, and trains exactly as fixed-batch runs of the same batches do.
#include <memory>
#include <string>
#include <vector>

#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.seq_length = 16;
  m.vocab_size = 64;
  return m;  // dropout 0.1: masks are keyed by sample, so they must match too
}

TrainConfig run_of(int64_t global_batch, int64_t iterations) {
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = global_batch;
  t.train_iters = iterations;
  t.log_interval = 1;
  t.eval_iters = 0;
  t.seed = 11;
  t.schedule.lr = 2e-3;
  t.schedule.lr_decay_style = "constant";  // the same learning rate whatever the batch
  return t;
}

// 2 samples an iteration until 4 are consumed, then 4: iterations read 0..1, 2..3, 4..7, 8..11.
TrainConfig scheduled_run() {
  TrainConfig t = run_of(0, 4);
  t.step_batch_size_schedule = BatchSchedule::parse("0:2 4:4", 0);
  return t;
}

// Records the train split's reads.
class RecordingSource : public SampleSource {
 public:
  explicit RecordingSource(std::shared_ptr<const SampleSource> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t sequence_length() const override { return inner_->sequence_length(); }
  void read(int64_t index, int32_t* tokens, int32_t* labels, float* mask) const override {
    inner_->read(index, tokens, labels, mask);
    reads.push_back(index);
  }
  mutable std::vector<int64_t> reads;

 private:
  std::shared_ptr<const SampleSource> inner_;
};

TEST(BatchScheduleTrain, EachIterationReadsAndLogsItsStepsBatch) {
  const ModelConfig m = tiny_model();
  TrainConfig t = scheduled_run();
  TrainConfig sized = t;
  sized.finalize();
  TrainData data = build_mock_train_data(m.vocab_size, m.seq_length, t.seed, false, sized.dataset_sizes());
  auto recording = std::make_shared<RecordingSource>(data.train);
  data.train = recording;
  Trainer trainer(m, t, data);
  std::vector<std::string> lines;
  const TrainResult r = trainer.run([&](const std::string& line) { lines.push_back(line); });
  ASSERT_EQ(r.iterations.size(), 4u);
  const std::vector<int64_t> batches = {2, 2, 4, 4}, consumed = {2, 4, 8, 12};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r.iterations[i].global_batch_size, batches[i]) << "iteration " << i + 1;
    EXPECT_EQ(r.iterations[i].consumed_samples, consumed[i]) << "iteration " << i + 1;
  }
  std::vector<int64_t> expected_reads;
  for (int64_t i = 0; i < 12; ++i) expected_reads.push_back(i);
  EXPECT_EQ(recording->reads, expected_reads);
  std::vector<std::string> logged;
  for (const std::string& line : lines)
    if (line.find(" iteration ") != std::string::npos && line.find("global batch size:") != std::string::npos)
      logged.push_back(line.substr(line.find("global batch size:"), 25));
  EXPECT_EQ(logged, (std::vector<std::string>{"global batch size:     2 ", "global batch size:     2 ",
                                              "global batch size:     4 ", "global batch size:     4 "}));
  // The start-up table, in tokens and samples, as Megatron prints it.
  bool table = false;
  for (const std::string& line : lines) table |= line == "  >= 64 tokens (4 samples) -> batch_size=4, num_microbatches=2";
  EXPECT_TRUE(table);
}

TEST(BatchScheduleTrain, LossesEqualFixedBatchRunsOfTheSameBatches) {
  const ModelConfig m = tiny_model();
  test::TempDir fixed_dir, scheduled_dir;
  // One data set for every run (its size would otherwise follow each run's flags).
  const TrainData data = build_mock_train_data(m.vocab_size, m.seq_length, 11, false, {16, 0, 0});
  // The schedule's run, saving: once when the micro-batch count changes (after iteration 2), once
  // at the end.
  TrainConfig t = scheduled_run();
  t.checkpoint.save = scheduled_dir.path();
  Trainer scheduled(m, t, data);
  const TrainResult got = scheduled.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), 4u);

  // Reference: two iterations of batch 2, then from their checkpoint two of batch 4.
  TrainConfig small = run_of(2, 2);
  small.checkpoint.save = fixed_dir.path();
  Trainer first(m, small, data);
  const TrainResult a = first.run([](const std::string&) {});
  TrainConfig large = run_of(4, 4);
  large.checkpoint.schedule_on_resume = ScheduleOnResume::from_flags;  // the batch moved the decay's end
  Trainer second(m, large, data);
  ASSERT_EQ(second.load_checkpoint(fixed_dir.path()), 2);
  const TrainResult b = second.run([](const std::string&) {});
  ASSERT_EQ(a.iterations.size(), 2u);
  ASSERT_EQ(b.iterations.size(), 2u);
  const IterationStats* want[4] = {&a.iterations[0], &a.iterations[1], &b.iterations[0], &b.iterations[1]};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got.iterations[i].loss, want[i]->loss) << "iteration " << i + 1;
    EXPECT_EQ(got.iterations[i].grad_norm, want[i]->grad_norm) << "iteration " << i + 1;
    EXPECT_EQ(got.iterations[i].consumed_samples, want[i]->consumed_samples) << "iteration " << i + 1;
  }
  EXPECT_NE(got.iterations[2].loss, got.iterations[1].loss);  // or the comparison proves little

  // The checkpoint taken when the batch grew resumes at sample 4.
  TrainConfig resumed = scheduled_run();
  resumed.checkpoint.ckpt_step = 2;
  Trainer at_change(m, resumed, data);
  ASSERT_EQ(at_change.load_checkpoint(scheduled_dir.path()), 2);
  EXPECT_EQ(at_change.consumed_train_samples(), 4);
}

}  // namespace
}  // namespace mt
