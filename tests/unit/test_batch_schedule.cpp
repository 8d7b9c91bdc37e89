// --step-batch-size-schedule: parsing and validation as Megatron's
// StepBatchsizeNumMicroBatchesCalculator (suffixes, tokens -> samples, sorting, one clear error per
// bad schedule), the batch and micro-batch count per consumed samples, the iterations of a
// sample-based run (update_train_iters' simulation), the dataset sizes, and the pipeline
// constraints checked for every step.
#include <string>
#include <vector>

#include "testing.h"
#include "train/batch_schedule.h"
#include "train/trainer.h"

namespace mt {
namespace {

std::vector<std::pair<int64_t, int64_t>> pairs(const BatchSchedule& s) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const BatchStep& step : s.steps()) out.emplace_back(step.from_sample, step.batch_size);
  return out;
}

using Pairs = std::vector<std::pair<int64_t, int64_t>>;

TEST(BatchSchedule, ParsesSuffixesAndConvertsTokensToSamples) {
  // Megatron's GPT-3 175B example with --seq-length 2048: 2.4B tokens = 1171875 samples.
  EXPECT_EQ(pairs(BatchSchedule::parse("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048)),
            (Pairs{{0, 16}, {1171875, 320}, {2343750, 624}, {3515625, 928}, {4687500, 1232}, {5859375, 1536}}));
  // The functional tests' schedule under --seq-length 4096 (200e9 // 4096 floors).
  EXPECT_EQ(pairs(BatchSchedule::parse("0:384 200B:768 400B:1152", 4096)),
            (Pairs{{0, 384}, {48828125, 768}, {97656250, 1152}}));
  // Commas, lower-case suffixes, K/M/T, a suffixed batch size, unsorted entries; samples when no
  // sequence length is known.
  EXPECT_EQ(pairs(BatchSchedule::parse(" 2m:1k,0:8  1.5K:16 1t:2000 ", 0)),
            (Pairs{{0, 8}, {1500, 16}, {2000000, 1000}, {1000000000000, 2000}}));
  // int(float(x) * multiplier) truncates.
  EXPECT_EQ(pairs(BatchSchedule::parse("0:4 10.9:8", 0)), (Pairs{{0, 4}, {10, 8}}));
}

TEST(BatchSchedule, BadSchedulesFailWithOneClearMessage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "has no entry"},
      {" , ", "has no entry"},
      {"0-16", "entry \"0-16\" has no ':'"},
      {"0:16 x:32", "\"x:32\" is not THRESHOLD:BATCH_SIZE"},
      {"0:16:2", "\"0:16:2\" is not THRESHOLD:BATCH_SIZE"},
      {"0:16 1Q:32", "\"1Q:32\" is not THRESHOLD:BATCH_SIZE"},
      {"0:", "\"0:\" is not THRESHOLD:BATCH_SIZE"},
      {"0:inf", "\"0:inf\" is not THRESHOLD:BATCH_SIZE"},
      {"0:0", "has batch size 0; batch sizes must be > 0"},
      {"0:-4", "has batch size -4"},
      {"100:16 200:32", "the first threshold must be 0 (got 100 samples)"},
      {"0:16 100:32 100:64", "thresholds must be strictly increasing; two of them are 100 samples"},
      {"0:32 100:16", "the batch size shrinks from 32 to 16 at 100 samples"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    test::expect_error_mentioning([&] { BatchSchedule::parse(text, 0); }, message);
  }
  // Two token thresholds inside one sample collide after conversion; the message says why.
  test::expect_error_mentioning([] { BatchSchedule::parse("0:16 10:32 20:64", 16); },
                                "two of them are 0 samples (thresholds are tokens // --seq-length)");
}

TEST(BatchSchedule, BatchAtConsumedSamples) {
  const BatchSchedule s = BatchSchedule::parse("0:2 4:4 12:8", 0);
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 2}, {3, 2}, {4, 4}, {11, 4}, {12, 8}, {1000, 8}};
  for (const auto& [consumed, batch] : expected) EXPECT_EQ(s.batch_at(consumed), batch) << consumed;
  EXPECT_EQ(s.final_batch(), 8);
  EXPECT_EQ(s.describe(), "0:2 4:4 12:8");
  EXPECT_EQ(BatchSchedule::constant(6).batch_at(12345), 6);
}

// training.py::update_train_iters, written out: one iteration at a time.
int64_t megatron_iterations(const BatchSchedule& s, int64_t train_samples) {
  int64_t iterations = 0, consumed = 0;
  while (consumed < train_samples) {
    consumed += s.batch_at(consumed);
    ++iterations;
  }
  return iterations;
}

TEST(BatchSchedule, IterationsForSamplesEqualMegatronsSimulation) {
  for (const char* text : {"0:2 4:4 12:8", "0:3 5:7 6:9 40:11", "0:16", "0:1 1:2 2:3 3:4 1000:5"})
    for (int64_t samples : {1, 2, 3, 4, 5, 11, 12, 13, 40, 41, 999, 5000}) {
      const BatchSchedule s = BatchSchedule::parse(text, 0);
      EXPECT_EQ(s.iterations_for_samples(samples), megatron_iterations(s, samples)) << text << ", " << samples;
    }
  // The 175B example's schedule over 1e9 samples: the closed form needs no billion-step loop.
  const BatchSchedule gpt3 = BatchSchedule::parse("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048);
  EXPECT_EQ(gpt3.iterations_for_samples(6'000'000), megatron_iterations(gpt3, 6'000'000));
}

TEST(BatchSchedule, RunsGroupIterationsByBatch) {
  const BatchSchedule s = BatchSchedule::parse("0:2 5:4 12:8", 0);
  // 0,2,4 at 2 (the third crosses 5), 6,10 at 4, then 14.. at 8.
  const std::vector<BatchRun> runs = s.runs(0, 7);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].start_sample, 0);
  EXPECT_EQ(runs[0].iterations, 3);
  EXPECT_EQ(runs[1].start_sample, 6);
  EXPECT_EQ(runs[1].batch_size, 4);
  EXPECT_EQ(runs[1].iterations, 2);
  EXPECT_EQ(runs[2].start_sample, 14);
  EXPECT_EQ(runs[2].iterations, 2);
  // A step that no iteration starts in is skipped.
  const std::vector<BatchRun> skip = BatchSchedule::parse("0:8 2:8 4:16", 0).runs(0, 2);
  ASSERT_EQ(skip.size(), 2u);
  EXPECT_EQ(skip[1].start_sample, 8);
  EXPECT_EQ(skip[1].batch_size, 16);
}

TrainConfig scheduled(const std::string& text, int64_t micro_batch = 2, int64_t dp = 1) {
  TrainConfig t;
  t.micro_batch_size = micro_batch;
  t.data_parallel_size = dp;
  t.step_batch_size_schedule = BatchSchedule::parse(text, 0);
  t.train_iters = 10;
  t.eval_iters = 0;
  t.schedule.lr = 1e-3;
  return t;
}

TEST(BatchSchedule, TrainConfigDerivesEachIterationsBatch) {
  TrainConfig t = scheduled("0:4 16:8 40:16", 2, 2);
  t.finalize();
  EXPECT_EQ(t.global_batch_size, 16);  // the final batch
  EXPECT_EQ(t.global_batch_at(15), 4);
  EXPECT_EQ(t.num_microbatches_at(0), 1);
  EXPECT_EQ(t.num_microbatches_at(16), 2);
  EXPECT_EQ(t.num_microbatches_at(40), 4);
  EXPECT_EQ(t.microbatch_counts(), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(t.eval_num_microbatches, 4);  // evaluation: the final batch
  EXPECT_EQ(t.lr_schedule().lr_decay_steps, 10 * 16);  // iteration flags count final batches, as Megatron

  // --global-batch-size equal to the final batch is accepted (Megatron's 175B example), another refused.
  TrainConfig same = scheduled("0:4 16:8");
  same.global_batch_size = 8;
  same.finalize();
  TrainConfig other = scheduled("0:4 16:8");
  other.global_batch_size = 4;
  test::expect_error_mentioning([&] { other.finalize(); },
                                "--global-batch-size 4 differs from the final batch size 8 of --step-batch-size-schedule");
  // Every step must divide into micro batch x dp, not only the first.
  TrainConfig odd = scheduled("0:4 16:6", 2, 2);
  test::expect_error_mentioning([&] { odd.finalize(); }, "batch size (6) is not a multiple of --micro-batch-size (2) x data-parallel size (2) = 4");
  TrainConfig eval = scheduled("0:4 16:8");
  eval.eval_global_batch_size = 2;
  eval.finalize();
  EXPECT_EQ(eval.eval_num_microbatches, 1);
}

TEST(BatchSchedule, SampleBasedRunsSimulateTheScheduleAndSizeTheData) {
  TrainConfig t = scheduled("0:2 4:4 12:8");
  t.train_iters.reset();
  t.train_samples = 13;
  t.eval_iters = 3;
  t.eval_interval = 2;
  t.finalize();
  // 0,2 | 4,8 | 12 -> 5 iterations; the last, read whole, ends at 20 samples.
  EXPECT_EQ(t.iterations, 5);
  EXPECT_EQ(t.iterations, megatron_iterations(t.batches, 13));
  EXPECT_EQ(t.dataset_sizes(), (std::array<int64_t, 3>{20, (5 / 2 + 1) * 3 * 8, 3 * 8}));
  // A constant batch still drops the last partial batch (update_train_iters' other branch).
  TrainConfig constant = scheduled("0:4");
  constant.step_batch_size_schedule.reset();
  constant.global_batch_size = 4;
  constant.train_iters.reset();
  constant.train_samples = 13;
  constant.finalize();
  EXPECT_EQ(constant.iterations, 3);
  EXPECT_EQ(constant.dataset_sizes()[0], 13);
  // Iteration-based: iterations x the final batch, as Megatron asks with --global-batch-size.
  TrainConfig by_iters = scheduled("0:2 4:4 12:8");
  by_iters.train_iters = 5;
  by_iters.finalize();
  EXPECT_EQ(by_iters.dataset_sizes()[0], 5 * 8);
}

ModelConfig four_layers() {
  ModelConfig m;
  m.num_layers = 4;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.seq_length = 16;
  m.vocab_size = 64;
  return m;
}

TEST(BatchSchedule, EveryStepMustFitTheInterleavedSchedule) {
  // pp 2 x 2 chunks: the interleaved schedule needs at least pp micro-batches per step.
  TrainConfig t = scheduled("0:2 8:4 16:8");
  t.pipeline.pp = 2;
  t.pipeline.virtual_stages_per_rank = 2;
  test::expect_error_mentioning([&] { pipeline_plan(training_layout(four_layers(), t, 2, {})); },
                                "a --step-batch-size-schedule step with 1 micro-batches per data-parallel rank");
  // From 2 micro-batches on every step fits; the layout is planned for the largest.
  t.step_batch_size_schedule = BatchSchedule::parse("0:4 8:8", 0);
  const TrainingLayout layout = training_layout(four_layers(), t, 2, {});
  EXPECT_EQ(layout.num_microbatches, 4);
  EXPECT_EQ(layout.earlier_microbatches, std::vector<int>{2});
  const PipelinePlan plan = pipeline_plan(layout);
  EXPECT_EQ(plan.train_by_microbatches.size(), 2u);
  EXPECT_EQ(plan.train(2).config.num_microbatches, 2);
  EXPECT_EQ(plan.largest_train().config.num_microbatches, 4);
  // A separate evaluation batch gets its own forward-only schedule, checked the same way.
  t.eval_global_batch_size = 2;
  t.eval_iters = 1;
  test::expect_error_mentioning([&] { pipeline_plan(training_layout(four_layers(), t, 2, {})); },
                                "evaluation (--eval-global-batch-size) with 1 micro-batches");
}

}  // namespace
}  // namespace mt
