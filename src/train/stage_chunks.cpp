#include "train/stage_chunks.h"

#include <cmath>

namespace mt {

TrainingChunk::TrainingChunk(Stage& stage, std::vector<MicroBatch> batches, std::vector<ForwardOptions> options,
                             std::function<void()> before_last_backward, int64_t iteration)
    : stage_(stage),
      batches_(std::move(batches)),
      options_(std::move(options)),
      before_last_backward_(std::move(before_last_backward)),
      slot_of_(batches_.size(), -1),
      losses_(batches_.size()),
      iteration_(iteration) {
  for (int s = stage_.slots(); s-- > 0;) free_slots_.push_back(s);
}

TensorView TrainingChunk::forward(int mb, const TensorView& input) {
  MT_CHECK(!free_slots_.empty()) << "pipeline: micro-batch " << mb << " finds all " << stage_.slots()
                                 << " activation slots of its stage busy";
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  slot_of_[static_cast<size_t>(mb)] = slot;
  const StageForward out = stage_.forward(slot, batches_[static_cast<size_t>(mb)], input, options_[static_cast<size_t>(mb)]);
  losses_[static_cast<size_t>(mb)] = out.loss;
  const double loss = out.loss.loss_sum;
  MT_CHECK(std::isfinite(loss)) << "found " << (std::isnan(loss) ? "NaN" : "Inf")
                                << " in local forward loss calculation at iteration " << iteration_ << " (micro-batch "
                                << mb << "): training diverged; lower --lr, lengthen the warmup (--lr-warmup-iters) or "
                                << "clip harder (--clip-grad)";
  return out.hidden;
}

TensorView TrainingChunk::backward(int mb, const TensorView& output_grad) {
  if (mb + 1 == static_cast<int>(batches_.size()) && before_last_backward_) before_last_backward_();
  const int slot = slot_of_[static_cast<size_t>(mb)];
  MT_CHECK(slot >= 0) << "pipeline: the backward of micro-batch " << mb << " comes before its forward";
  const TensorView dx = stage_.backward(slot, output_grad);
  slot_of_[static_cast<size_t>(mb)] = -1;
  free_slots_.push_back(slot);
  return dx;
}

EvaluationChunk::EvaluationChunk(Stage& stage, std::vector<MicroBatch> batches)
    : stage_(stage), batches_(std::move(batches)), losses_(batches_.size()) {}

TensorView EvaluationChunk::forward(int mb, const TensorView& input) {
  const StageForward out = stage_.forward_only(batches_[static_cast<size_t>(mb)], input);
  losses_[static_cast<size_t>(mb)] = out.loss;
  return out.hidden;
}

TensorView EvaluationChunk::backward(int mb, const TensorView&) {
  MT_FAIL() << "pipeline: evaluation runs no backward (micro-batch " << mb << ")";
}

}  // namespace mt
