// Owns the global batch size as a function of the samples consumed so far: Megatron's
// --step-batch-size-schedule (num_microbatches_calculator.py, StepBatchsizeNumMicroBatchesCalculator)
// and a constant --global-batch-size as its one-step case, with what a run derives from it (the
// iterations a sample-based run takes, the samples an iteration-based one consumes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

// From `from_sample` consumed samples on, each iteration reads `batch_size` samples.
struct BatchStep {
  int64_t from_sample = 0;
  int64_t batch_size = 0;
};

// Iterations in a row at one batch size (what BatchSchedule::runs walks).
struct BatchRun {
  int64_t start_sample = 0;  // consumed samples before the first of them
  int64_t batch_size = 0;
  int64_t iterations = 0;
};

class BatchSchedule {
 public:
  BatchSchedule() = default;
  // One batch size throughout.
  static BatchSchedule constant(int64_t batch_size);
  // "THRESHOLD:BATCH ..." separated by spaces or commas, each number an integer or decimal with an
  // optional K, M, B or T suffix (x1e3 .. x1e12, truncated as Megatron's int(float(x) * m)).
  // Thresholds count tokens when seq_length > 0 (samples = tokens // seq_length, as Megatron
  // always does for GPT), samples otherwise. Sorted by threshold; the first must be 0, thresholds
  // strictly increase (after conversion) and batch sizes are positive and never shrink (Megatron
  // stops at run time when the micro-batch count decreases). Throws mt::Error naming the entry.
  static BatchSchedule parse(const std::string& text, int64_t seq_length);

  const std::vector<BatchStep>& steps() const { return steps_; }
  bool empty() const { return steps_.empty(); }
  // The batch of the iteration that starts after `consumed` samples.
  int64_t batch_at(int64_t consumed) const;
  // The last step's batch (the largest).
  int64_t final_batch() const { return steps_.back().batch_size; }
  // training.py::update_train_iters under a schedule: iterations until at least `samples` are
  // consumed (the last batch is read whole).
  int64_t iterations_for_samples(int64_t samples) const;
  // `iterations` iterations from `consumed` samples, grouped by batch size.
  std::vector<BatchRun> runs(int64_t consumed, int64_t iterations) const;
  // "0:16 1171875:320" (thresholds in samples).
  std::string describe() const;

 private:
  std::vector<BatchStep> steps_;
  // The sample the step after the one at `consumed` starts at (INT64_MAX after the last).
  int64_t next_threshold(int64_t consumed) const;
};

}  // namespace mt
