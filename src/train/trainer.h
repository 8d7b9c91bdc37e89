// Owns the training loop: micro-batches accumulated into a global batch, the optimizer step,
// throughput and memory metrics, and Megatron's log line.  (The trainer issue grows this into
// the full `pretrain_gpt.py` loop: schedules, mixed precision, evaluation, real data.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "optim/optimizer.h"

namespace mt {

struct TrainConfig {
  int64_t micro_batch_size = 4;   // --micro-batch-size
  int64_t global_batch_size = 0;  // --global-batch-size; 0 = micro batch (no accumulation)
  int64_t train_iters = 20;       // --train-iters
  int64_t log_interval = 1;       // --log-interval
  uint64_t seed = 1234;           // --seed
  OptimizerConfig optimizer;
};

struct IterationStats {
  int64_t iteration = 0;
  double loss = 0.0;        // mean over the micro-batches of the global batch
  double grad_norm = 0.0;
  double elapsed_ms = 0.0;
  double tflops = 0.0;      // Megatron's formula / elapsed time
  double tokens_per_s = 0.0;
};

class Trainer {
 public:
  Trainer(const ModelConfig& model, const TrainConfig& train);

  // Runs train_iters iterations on synthetic tokens, calling `log` with each formatted log line.
  std::vector<IterationStats> run(const std::function<void(const std::string&)>& log);

  GptModel& model() { return *model_; }
  const MemoryTracker& memory() const { return memory_; }

 private:
  ModelConfig model_config_;
  TrainConfig config_;
  MemoryTracker memory_;
  std::unique_ptr<GptModel> model_;
  std::unique_ptr<AdamW> optimizer_;
};

// Megatron's log line for one iteration.
std::string format_log_line(const IterationStats& stats, const TrainConfig& config, float lr);

}  // namespace mt
