#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"

namespace mt {

namespace {

// Which gradients this rank counts in the norm: its shards, and the parameters every tensor-parallel
// rank holds whole on tp rank 0 only (Megatron's param_is_not_tensor_parallel_duplicate).
bool counts_in_norm(const Param& p, int tp_rank) { return p.shard.sharded() || tp_rank == 0; }

// The norm from this rank's sum of squares: summed (in double) over the model-parallel group first.
double norm_over(double local_sum, Communicator* model_parallel) {
  if (model_parallel && model_parallel->size() > 1)
    model_parallel->all_reduce(TensorView(&local_sum, DType::f64, {1}), ReduceOp::sum);
  return std::sqrt(local_sum);
}

}  // namespace

double grad_norm(const std::vector<Param>& params, Communicator* model_parallel, int tp_rank) {
  double sum = 0.0;
  for (const Param& p : params)
    if (counts_in_norm(p, tp_rank)) sum += sum_squares(p.grad);
  return norm_over(sum, model_parallel);
}

double clip_coefficient(double norm, double clip_grad) {
  if (clip_grad <= 0.0) return 1.0;
  return std::min(1.0, clip_grad / (norm + 1e-6));
}

double clip_grads(const std::vector<Param>& params, double norm, double clip_grad) {
  const double coeff = clip_coefficient(norm, clip_grad);
  if (coeff < 1.0)
    for (const Param& p : params) scale_inplace(p.grad, static_cast<float>(coeff));
  return coeff;
}

AdamW::AdamW(std::vector<Param>& params, Backend& backend, MemoryTracker* tracker, Communicator* model_parallel,
             int tp_rank)
    : params_(params), model_parallel_(model_parallel), tp_rank_(tp_rank) {
  // The state lies parallel to the gradient buffer: each parameter's moments (and f32 main copy)
  // at its buffer offset, so a slice of the gradient buffer is the same slice of the state.
  // Parameters in no buffer follow, one after another.
  std::vector<int64_t> offsets;
  int64_t extent = 0;
  bool any_16bit = false;
  for (const Param& p : params_) {
    if (p.buffer_offset >= 0) extent = std::max(extent, p.buffer_offset + p.value.numel());
    any_16bit = any_16bit || p.value.dtype != DType::f32;
  }
  for (const Param& p : params_) {
    offsets.push_back(p.buffer_offset >= 0 ? p.buffer_offset : extent);
    if (p.buffer_offset < 0) extent += p.value.numel();
  }
  auto carve = [&](Arena& arena) {
    const TensorView m = arena.alloc(DType::f32, {extent}), v = arena.alloc(DType::f32, {extent});
    const TensorView main = any_16bit ? arena.alloc(DType::f32, {extent}) : TensorView();
    m_.clear();
    v_.clear();
    main_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      const Param& p = params_[i];
      auto at = [&](const TensorView& buffer) { return buffer.rows(offsets[i], p.value.numel()).reshape(p.value.shape); };
      m_.push_back(at(m));
      v_.push_back(at(v));
      main_.push_back(p.value.dtype == DType::f32 ? p.value : at(main));
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
// copy), each one multi-tensor launch: the norm of the unscaled gradients read straight from the
// scaled ones, then one fused AdamW pass that unscales, clips, updates and writes the 16-bit copy.
// The result is bit for bit that of the separate per-tensor passes (see AdamWParams::grad_unscale
// and unscaled_sum_squares); the gradients are left as they came.
AdamW::StepResult AdamW::step(const OptimizerConfig& config, float lr, float weight_decay, float loss_scale) {
  StepResult result;
  const float unscale = 1.0f / loss_scale;
  norm_grads_.clear();
  for (const Param& p : params_)
    if (counts_in_norm(p, tp_rank_)) norm_grads_.push_back(p.grad);
  norm_sums_.resize(norm_grads_.size());
  const size_t scratch = static_cast<size_t>(unscaled_sum_squares_multi_scratch(norm_grads_));
  if (norm_scratch_.size() < scratch) norm_scratch_.resize(scratch);
  unscaled_sum_squares_multi(norm_grads_, unscale, norm_scratch_, norm_sums_);
  double sum = 0.0;  // in parameter order, as grad_norm adds them
  for (double s : norm_sums_) sum += s;
  result.grad_norm = norm_over(sum, model_parallel_);
  if (!std::isfinite(result.grad_norm)) {
    result.found_inf = true;
    return result;
  }
  const auto clip = static_cast<float>(clip_coefficient(result.grad_norm, config.clip_grad));
  ++step_;
  AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = config.adam_beta1;
  hp.beta2 = config.adam_beta2;
  hp.eps = config.adam_eps;
  hp.step = step_;
  hp.grad_unscale = unscale;
  hp.grad_clip = clip;
  update_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    const bool has_main = main_[i].data != params_[i].value.data;
    update_.push_back({main_[i], params_[i].grad, m_[i], v_[i], has_main ? params_[i].value : TensorView(),
                       params_[i].weight_decay ? weight_decay : 0.0f});
  }
  adamw_update_multi(update_, hp);
  return result;
}

}  // namespace mt
