#include "optim/optimizer.h"

#include <cmath>

#include "ops/elementwise.h"

namespace mt {

double grad_norm(const std::vector<Param>& params, Communicator* model_parallel) {
  const bool counts_replicas = model_parallel == nullptr || model_parallel->rank() == 0;
  double sum = 0.0;
  for (const Param& p : params)
    if (p.shard.sharded() || counts_replicas) sum += sum_squares(p.grad);
  if (model_parallel && model_parallel->size() > 1) {
    float total = static_cast<float>(sum);
    model_parallel->all_reduce(TensorView(&total, DType::f32, {1}), ReduceOp::sum);
    sum = total;
  }
  return std::sqrt(sum);
}

void finalize_model_grads(const std::vector<Param>& params, Communicator* tp) {
  if (tp == nullptr || tp->size() == 1) return;
  for (const Param& p : params)
    if (p.sequence_parallel) tp->all_reduce(p.grad, ReduceOp::sum);
}

double clip_grads(const std::vector<Param>& params, double norm, double clip_grad) {
  if (clip_grad <= 0.0) return 1.0;
  const double coeff = clip_grad / (norm + 1e-6);
  if (coeff >= 1.0) return 1.0;
  for (const Param& p : params) scale_inplace(p.grad, static_cast<float>(coeff));
  return coeff;
}

AdamW::AdamW(std::vector<Param>& params, Backend& backend, MemoryTracker* tracker, Communicator* model_parallel)
    : params_(params), model_parallel_(model_parallel) {
  auto carve = [&](Arena& arena) {
    m_.clear();
    v_.clear();
    main_.clear();
    for (const Param& p : params_) {
      m_.push_back(arena.alloc(DType::f32, p.value.shape));
      v_.push_back(arena.alloc(DType::f32, p.value.shape));
      main_.push_back(p.value.dtype == DType::f32 ? p.value : arena.alloc(DType::f32, p.value.shape));
    }
  };
  Arena measure(MemCategory::optimizer);
  carve(measure);
  state_ = std::make_unique<Arena>(backend, MemCategory::optimizer, measure.used(), tracker);
  carve(*state_);
  state_->zero_used();
  for (size_t i = 0; i < params_.size(); ++i)
    if (main_[i].data != params_[i].value.data) cast(main_[i], params_[i].value);
}

AdamW::StepResult AdamW::step(const OptimizerConfig& config, float lr, float weight_decay, float loss_scale) {
  StepResult result;
  if (loss_scale != 1.0f)
    for (const Param& p : params_) scale_inplace(p.grad, 1.0f / loss_scale);
  result.grad_norm = grad_norm(params_, model_parallel_);
  if (!std::isfinite(result.grad_norm)) {
    result.found_inf = true;
    return result;
  }
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
    adamw_update(main_[i], params_[i].grad, m_[i], v_[i], hp);
    if (main_[i].data != params_[i].value.data) cast(params_[i].value, main_[i]);
  }
  return result;
}

}  // namespace mt
