// Owns the optimizer state and step for the parameters of a ParamStore: fp32 Adam moments in one
// arena (category "optimizer"), the global gradient L2 norm, Megatron's clipping, and AdamW with
// Megatron's weight-decay exclusions (biases and 1-D parameters are not decayed).
#pragma once

#include <memory>
#include <vector>

#include "backend/arena.h"
#include "model/params.h"
#include "ops/adamw.h"

namespace mt {

struct OptimizerConfig {
  float lr = 1e-4f;
  float weight_decay = 0.01f;  // --weight-decay
  float adam_beta1 = 0.9f;
  float adam_beta2 = 0.999f;
  float adam_eps = 1e-8f;
  float clip_grad = 1.0f;      // --clip-grad; 0 disables clipping
};

// L2 norm of all gradients (each parameter counted once), accumulated in double.
double grad_norm(const std::vector<Param>& params);

// Megatron's clip: when clip_grad > 0 and coeff = clip_grad / (norm + 1e-6) < 1, scale every
// gradient by coeff. Returns the coefficient applied (1 when none).
double clip_grads(const std::vector<Param>& params, double norm, double clip_grad);

class AdamW {
 public:
  AdamW(std::vector<Param>& params, Backend& backend, MemoryTracker* tracker);

  struct StepResult {
    double grad_norm = 0.0;  // before clipping
  };
  // One step: global norm, clip, AdamW update of every parameter at learning rate `lr` and
  // weight decay `weight_decay` (the schedules decide both).
  StepResult step(const OptimizerConfig& config, float lr, float weight_decay);

  int64_t steps() const { return step_; }
  size_t state_bytes() const { return state_->requested(); }

 private:
  std::vector<Param>& params_;
  std::unique_ptr<Arena> state_;
  std::vector<TensorView> m_, v_;
  int64_t step_ = 0;
};

}  // namespace mt
