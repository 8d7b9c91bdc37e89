#include "optim/optimizer.h"

#include <cmath>

#include "ops/elementwise.h"

namespace mt {

double grad_norm(const std::vector<Param>& params) {
  double sum = 0.0;
  for (const Param& p : params) sum += sum_squares(p.grad);
  return std::sqrt(sum);
}

double clip_grads(const std::vector<Param>& params, double norm, double clip_grad) {
  if (clip_grad <= 0.0) return 1.0;
  const double coeff = clip_grad / (norm + 1e-6);
  if (coeff >= 1.0) return 1.0;
  for (const Param& p : params) scale_inplace(p.grad, static_cast<float>(coeff));
  return coeff;
}

AdamW::AdamW(std::vector<Param>& params, Backend& backend, MemoryTracker* tracker) : params_(params) {
  Arena measure(MemCategory::optimizer);
  for (const Param& p : params_) {
    measure.alloc(DType::f32, p.value.shape);
    measure.alloc(DType::f32, p.value.shape);
  }
  state_ = std::make_unique<Arena>(backend, MemCategory::optimizer, measure.used(), tracker);
  for (const Param& p : params_) {
    m_.push_back(state_->alloc(DType::f32, p.value.shape));
    v_.push_back(state_->alloc(DType::f32, p.value.shape));
  }
  state_->zero_used();
}

AdamW::StepResult AdamW::step(const OptimizerConfig& config, float lr, float weight_decay) {
  StepResult result;
  result.grad_norm = grad_norm(params_);
  clip_grads(params_, result.grad_norm, config.clip_grad);
  ++step_;
  AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = config.adam_beta1;
  hp.beta2 = config.adam_beta2;
  hp.eps = config.adam_eps;
  hp.step = step_;
  for (size_t i = 0; i < params_.size(); ++i) {
    hp.weight_decay = params_[i].weight_decay ? weight_decay : 0.0f;
    adamw_update(params_[i].value, params_[i].grad, m_[i], v_[i], hp);
  }
  return result;
}

}  // namespace mt
