// Owns GptModel (Megatron's GPTModel on one rank without pipelining): the whole model as one
// Stage with one slot, driven one micro-batch at a time (forward, then backward). Pipeline
// schedules drive Stages directly (model/stage.h).
#pragma once

#include <memory>

#include "model/stage.h"

namespace mt {

struct GptModelOptions {
  int threads = 0;                  // threads the workspaces are sized for; 0 = the backend's
  int64_t head_chunk_tokens = 512;  // rows of logits alive at once in the output layer
  // The tensor-parallel group (size config.tensor_model_parallel_size); its sequence_parallel
  // flag is taken from the config. Every rank of the group runs the same micro-batch.
  Communicator* tp_comm = nullptr;
  DdpConfig ddp;  // how the parameter and gradient buffers are laid out (param_layout.h)
};

class GptModel {
 public:
  // micro_batch and config.seq_length fix every activation shape.
  GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
           const GptModelOptions& options = {});

  // Runs the model on one micro-batch and keeps what backward needs (when options.grad_scale != 0).
  LossSums forward(const MicroBatch& batch, const ForwardOptions& options) {
    return stage_.forward(0, batch, TensorView(), options).loss;
  }
  // Accumulates grad_scale · d(loss_sum)/dθ into the gradients of params(). Call after a forward
  // with grad_scale != 0.
  void backward() { stage_.backward(0, TensorView()); }
  // The forward-only path (no dropout, nothing kept): loss sums when batch.labels is given, and
  // every row's logits [s·b, V_padded/t] ([s, b] row order) into `logits` when it is not empty.
  LossSums forward_only(const MicroBatch& batch, const TensorView& logits = {}) {
    return stage_.forward_only(batch, TensorView(), logits).loss;
  }

  Stage& stage() { return stage_; }
  ParamStore& params() { return stage_.params(); }  // the dense ones (Stage::param_stores: all)
  void init(uint64_t seed) { stage_.init_params(seed); }  // every parameter, experts included
  const ModelConfig& config() const { return stage_.config(); }
  const TensorParallel& tensor_parallel() const { return stage_.tensor_parallel(); }
  int64_t micro_batch() const { return stage_.micro_batch(); }
  // See Stage::last_logits_chunk.
  TensorView last_logits_chunk() const { return stage_.last_logits_chunk(); }
  // Bytes of saved activations (exact, as carved from the arena).
  size_t activation_bytes() const { return stage_.activation_bytes(); }
  void set_seed(uint64_t seed) { stage_.set_seed(seed); }

 private:
  Stage stage_;
};

}  // namespace mt
