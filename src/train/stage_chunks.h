// Owns the adapters that let the pipeline executor (pipeline/executor.h) drive a model Stage: one
// global batch of training (forwards into slots, backwards freeing them, the last stage's loss
// sums per micro-batch), and evaluation through the forward-only path.
#pragma once

#include <functional>
#include <vector>

#include "model/stage.h"
#include "pipeline/executor.h"

namespace mt {

class TrainingChunk final : public PipelineChunk {
 public:
  // batches[mb] and options[mb]: this rank's micro-batches of the global batch and their forward
  // options. before_last_backward runs just before the last micro-batch's backward (data
  // parallelism starts its bucket reductions during that one). A non-finite loss is fatal at once,
  // before its backward (pretrain_gpt.py's loss_func with Megatron's default
  // --check-for-nan-in-loss-and-grad); `iteration` (1-based) names it in the message.
  TrainingChunk(Stage& stage, std::vector<MicroBatch> batches, std::vector<ForwardOptions> options,
                std::function<void()> before_last_backward, int64_t iteration);
  TensorView forward(int mb, const TensorView& input) override;
  TensorView backward(int mb, const TensorView& output_grad) override;
  // Per micro-batch: the loss sums (on the stage with the head; zeros elsewhere).
  const std::vector<LossSums>& losses() const { return losses_; }

 private:
  Stage& stage_;
  std::vector<MicroBatch> batches_;
  std::vector<ForwardOptions> options_;
  std::function<void()> before_last_backward_;
  std::vector<int> slot_of_;     // per micro-batch, while in flight
  std::vector<int> free_slots_;
  std::vector<LossSums> losses_;
  int64_t iteration_;
};

class EvaluationChunk final : public PipelineChunk {
 public:
  EvaluationChunk(Stage& stage, std::vector<MicroBatch> batches);
  TensorView forward(int mb, const TensorView& input) override;
  TensorView backward(int mb, const TensorView& output_grad) override;  // an error: nothing to run
  const std::vector<LossSums>& losses() const { return losses_; }

 private:
  Stage& stage_;
  std::vector<MicroBatch> batches_;
  std::vector<LossSums> losses_;
};

}  // namespace mt
