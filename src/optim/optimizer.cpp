#include "optim/optimizer.h"

#include <cmath>

#include "ops/elementwise.h"

namespace mt {

namespace {

// The local sum of squares over the gradients this rank counts (see grad_norm), each computed by
// `sum_squares_of`, then summed over the model-parallel group; returns the norm.
template <typename SumSquares>
double global_norm(const std::vector<Param>& params, Communicator* model_parallel, SumSquares sum_squares_of) {
  const bool counts_replicas = model_parallel == nullptr || model_parallel->rank() == 0;
  double sum = 0.0;
  for (const Param& p : params)
    if (p.shard.sharded() || counts_replicas) sum += sum_squares_of(p.grad);
  if (model_parallel && model_parallel->size() > 1) {
    float total = static_cast<float>(sum);
    model_parallel->all_reduce(TensorView(&total, DType::f32, {1}), ReduceOp::sum);
    sum = total;
  }
  return std::sqrt(sum);
}

}  // namespace

double grad_norm(const std::vector<Param>& params, Communicator* model_parallel) {
  return global_norm(params, model_parallel, [](const TensorView& g) { return sum_squares(g); });
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

// Two passes over the gradients instead of up to five (unscale, norm, clip, update, 16-bit
// copy): the norm of the unscaled gradients read straight from the scaled ones, then one fused
// AdamW pass that unscales, clips, updates and writes the 16-bit copy. The result is bit for bit
// that of the separate passes (see AdamWParams::grad_unscale); the gradients are left as they came.
AdamW::StepResult AdamW::step(const OptimizerConfig& config, float lr, float weight_decay, float loss_scale) {
  StepResult result;
  const float unscale = 1.0f / loss_scale;
  result.grad_norm = loss_scale == 1.0f ? grad_norm(params_, model_parallel_)
                                        : global_norm(params_, model_parallel_, [unscale](const TensorView& g) {
                                            return unscaled_sum_squares(g, unscale);
                                          });
  if (!std::isfinite(result.grad_norm)) {
    result.found_inf = true;
    return result;
  }
  // Megatron's clip (as clip_grads): coeff = clip / (norm + 1e-6), applied only when below 1.
  float clip = 1.0f;
  if (config.clip_grad > 0.0f) {
    const double coeff = static_cast<double>(config.clip_grad) / (result.grad_norm + 1e-6);
    if (coeff < 1.0) clip = static_cast<float>(coeff);
  }
  ++step_;
  AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = config.adam_beta1;
  hp.beta2 = config.adam_beta2;
  hp.eps = config.adam_eps;
  hp.step = step_;
  hp.grad_unscale = unscale;
  hp.grad_clip = clip;
  for (size_t i = 0; i < params_.size(); ++i) {
    hp.weight_decay = params_[i].weight_decay ? weight_decay : 0.0f;
    const bool has_main = main_[i].data != params_[i].value.data;
    adamw_update(main_[i], params_[i].grad, m_[i], v_[i], hp, has_main ? params_[i].value : TensorView());
  }
  return result;
}

}  // namespace mt
