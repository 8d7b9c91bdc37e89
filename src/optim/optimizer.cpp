#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"
#include "ops/muon.h"
#include "parallel/process_groups.h"

namespace mt {

namespace {

// The norm from this rank's sum of squares: summed (in double) over the model-parallel group first.
double norm_over(double local_sum, Communicator* model_parallel) {
  if (model_parallel && model_parallel->size() > 1)
    model_parallel->all_reduce(TensorView(&local_sum, DType::f64, {1}), ReduceOp::sum);
  return std::sqrt(local_sum);
}

// Megatron's rule: biases and 1-D parameters do not decay, unless --apply-wd-to-qk-layernorm makes
// an exception of the query and key norms.
bool decays(const Param& p, const OptimizerConfig& config) {
  return p.weight_decay || (config.apply_wd_to_qk_layernorm && is_qk_layernorm(p));
}

}  // namespace

double grad_norm(const std::vector<Param>& params, Communicator* model_parallel) {
  double sum = 0.0;
  for (const Param& p : params)
    if (is_counted_copy(p)) sum += sum_squares(p.grad);
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

Optimizer::Optimizer(const std::vector<OptimizedParams>& chunks, Backend& backend, MemoryTracker* tracker,
                     Communicator* model_parallel, const MuonSetup* muon) {
  // Which elements this rank updates, and where their state lies (chunk after chunk): whole
  // parameters at their gradient-buffer offsets (parameters in no buffer after those, one after
  // another), so a slice of the gradient buffer is the same slice of the state; or under the
  // distributed optimizer the parts inside this rank's shard of every bucket, the shards one
  // after another.
  struct Place {
    const Param* param;
    int64_t begin, end, state;
    size_t norm;
    bool muon;
  };
  std::vector<Place> places;
  bool any_16bit = false;
  int64_t largest_bucket = 0;
  for (const OptimizedParams& chunk : chunks) {
    const std::vector<Param>& params = *chunk.params;
    const DistributedShard& shard = chunk.shard;
    for (const Param& p : params) any_16bit = any_16bit || p.value.dtype != DType::f32;
    const int64_t base = state_numel_;
    const bool distributed = shard.layout != nullptr && shard.dp != nullptr && shard.dp->size() > 1;
    std::vector<bool> is_muon;
    for (const Param& p : params) is_muon.push_back(muon != nullptr && is_muon_param(p));
    chunks_.push_back({&params, shard, distributed, std::move(is_muon), std::vector<int>(params.size(), -1)});
    const size_t first_place = places.size();
    const NormGroup group{distributed ? shard.dp : nullptr, chunk.norm_group ? chunk.norm_group : model_parallel};
    size_t norm = 0;
    while (norm < norm_groups_.size() &&
           (norm_groups_[norm].dp != group.dp || norm_groups_[norm].model != group.model))
      ++norm;
    if (norm == norm_groups_.size()) norm_groups_.push_back(group);
    if (distributed) {
      MT_CHECK(shard.layout->params.size() == params.size())
          << "the distributed optimizer's layout has " << shard.layout->params.size() << " parameters, the model "
          << params.size();
      for (const DdpBucket& bucket : shard.layout->buckets) {
        const BufferRange mine = bucket.shard(shard.dp->rank(), shard.dp->size());
        for (int i : bucket.params) {
          const BufferRange at = shard.layout->params[static_cast<size_t>(i)];
          const int64_t lo = std::max(at.start, mine.start), hi = std::min(at.end, mine.end);
          if (lo < hi)
            places.push_back({&params[static_cast<size_t>(i)], lo - at.start, hi - at.start,
                              state_numel_ + lo - mine.start, norm, chunks_.back().muon[static_cast<size_t>(i)]});
        }
        state_numel_ += mine.numel();
        largest_bucket = std::max(largest_bucket, bucket.range.numel());
      }
    } else {
      int64_t end = base;
      for (const Param& p : params)
        if (p.buffer_offset >= 0) end = std::max(end, base + p.buffer_offset + p.value.numel());
      for (const Param& p : params) {
        places.push_back({&p, 0, p.value.numel(), p.buffer_offset >= 0 ? base + p.buffer_offset : end, norm,
                          chunks_.back().muon[static_cast<size_t>(&p - params.data())]});
        if (p.buffer_offset < 0) end += p.value.numel();
      }
      state_numel_ = end;
    }
    for (size_t i = first_place; i < places.size(); ++i)
      chunks_.back().segment_of[static_cast<size_t>(places[i].param - params.data())] = static_cast<int>(i);
  }
  // Muon keeps one state (its momentum, in m); only Adam's segments have a v, one after another,
  // in as many elements as the dp rank with the most of them needs (so every rank holds the same).
  int64_t adam_numel = 0;
  for (const Chunk& chunk : chunks_) {
    std::vector<bool> adam;
    for (const bool m : chunk.muon) adam.push_back(!m);
    if (chunk.distributed) {
      adam_numel += selected_state_elements(*chunk.shard.layout, adam, chunk.shard.dp->size());
    } else {
      for (size_t i = 0; i < adam.size(); ++i)
        if (adam[i]) adam_numel += (*chunk.params)[i].value.numel();
    }
  }
  const bool muon_distributed =
      muon != nullptr && std::any_of(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return c.distributed; });
  auto carve = [&](Arena& arena) {
    const TensorView m = arena.alloc(DType::f32, {state_numel_}), v = arena.alloc(DType::f32, {adam_numel});
    const TensorView main = any_16bit ? arena.alloc(DType::f32, {state_numel_}) : TensorView();
    muon_bucket_ = muon_distributed ? arena.alloc(DType::f32, {largest_bucket}) : TensorView();
    segments_.clear();
    int64_t v_at = 0;
    for (const Place& at : places) {
      const int64_t n = at.end - at.begin;
      Segment s;
      s.param = at.param;
      s.begin = at.begin;
      s.end = at.end;
      s.norm = at.norm;
      s.muon = at.muon;
      s.m = m.rows(at.state, n);
      if (!s.muon) {
        s.v = v.rows(v_at, n);
        v_at += n;
      }
      if (at.param->value.dtype != DType::f32) s.main = main.rows(at.state, n);
      segments_.push_back(s);
    }
  };
  Arena measure(MemCategory::optimizer);
  carve(measure);
  state_ = std::make_unique<Arena>(backend, MemCategory::optimizer, measure.used(), tracker);
  carve(*state_);
  state_->zero_used();
  for (const Segment& s : segments_)
    if (!s.main.empty()) cast(s.main, value_of(s));
  if (muon == nullptr) return;
  std::vector<const Param*> matrices;
  for (const Chunk& chunk : chunks_)
    for (size_t i = 0; i < chunk.muon.size(); ++i)
      if (chunk.muon[i]) matrices.push_back(&(*chunk.params)[i]);
  muon_ = std::make_unique<MuonOrthogonalizer>(*muon, matrices, backend, tracker);
}

TensorView Optimizer::grad_of(const Segment& s) const {
  const TensorView& g = s.param->grad;
  return g.reshape({g.numel()}).rows(s.begin, s.end - s.begin);
}

TensorView Optimizer::value_of(const Segment& s) const {
  const TensorView& v = s.param->value;
  return v.reshape({v.numel()}).rows(s.begin, s.end - s.begin);
}

// Two passes over the gradients instead of up to five (unscale, norm, clip, update, 16-bit
// copy), each one multi-tensor launch: the norm of the unscaled gradients read straight from the
// scaled ones, then one fused AdamW pass that unscales, clips, updates and writes the 16-bit copy.
// The result is bit for bit that of the separate per-tensor passes (see AdamWParams::grad_unscale
// and unscaled_sum_squares); the gradients are left as they came.
double Optimizer::global_norm(bool values, float unscale) {
  norm_tensors_.clear();
  norm_group_of_.clear();
  for (const Segment& s : segments_)
    if (is_counted_copy(*s.param)) {
      norm_tensors_.push_back(!values ? grad_of(s) : s.main.empty() ? value_of(s) : s.main);
      norm_group_of_.push_back(s.norm);
    }
  norm_sums_.resize(norm_tensors_.size());
  const size_t scratch = static_cast<size_t>(unscaled_sum_squares_multi_scratch(norm_tensors_));
  if (norm_scratch_.size() < scratch) norm_scratch_.resize(scratch);
  unscaled_sum_squares_multi(norm_tensors_, unscale, norm_scratch_, norm_sums_);
  group_sums_.assign(norm_groups_.size(), 0.0);  // in parameter order, as grad_norm adds them
  for (size_t i = 0; i < norm_sums_.size(); ++i) group_sums_[norm_group_of_[i]] += norm_sums_[i];
  double sum = 0.0;
  for (size_t g = 0; g < norm_groups_.size(); ++g) {
    // Under the distributed optimizer each dp rank holds the sums of its shards only.
    double group = sum_over(norm_groups_[g].dp, group_sums_[g]);
    group = sum_over(norm_groups_[g].model, group);
    sum += group;
  }
  return std::sqrt(sum);
}

double Optimizer::params_norm() { return global_norm(/*values=*/true, 1.0f); }

Optimizer::StepResult Optimizer::step(const OptimizerConfig& config, float lr, float weight_decay, float loss_scale,
                                      std::optional<float> embedding_or_output_lr) {
  StepResult result;
  const float unscale = 1.0f / loss_scale;
  result.grad_norm = global_norm(/*values=*/false, unscale);
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
  decoupled_update_.clear();
  for (const Segment& s : segments_) {
    if (s.muon) continue;
    const TensorView value = value_of(s);
    // f32 parameters are their own master copy; 16-bit ones receive the updated master's rounding.
    (embedding_or_output_lr && is_embedding_or_output(*s.param) ? decoupled_update_ : update_)
        .push_back({s.main.empty() ? value : s.main, grad_of(s), s.m, s.v, s.main.empty() ? TensorView() : value,
                    decays(*s.param, config) ? weight_decay : 0.0f});
  }
  adamw_update_multi(update_, hp);
  if (!decoupled_update_.empty()) {
    hp.lr = *embedding_or_output_lr;
    adamw_update_multi(decoupled_update_, hp);
  }
  if (muon_) muon_step(lr, weight_decay, unscale, clip);
  return result;
}

void Optimizer::muon_apply_to(const Segment& s, const TensorView& update, float lr, float weight_decay) {
  const TensorView value = value_of(s);
  const float decay = s.param->weight_decay ? weight_decay : 0.0f;  // matrices: never a QK norm
  muon_apply(s.main.empty() ? value : s.main, update, lr, decay, s.main.empty() ? TensorView() : value);
}

void Optimizer::muon_step(float lr, float weight_decay, float unscale, float clip) {
  const MuonConfig& c = muon_->config();
  const MuonMomentumArgs momentum{c.momentum, c.nesterov, unscale, clip};
  for (const Chunk& chunk : chunks_) {
    const std::vector<Param>& params = *chunk.params;
    if (!chunk.distributed) {
      for (size_t i = 0; i < params.size(); ++i) {
        if (!chunk.muon[i]) continue;
        const Param& p = params[i];
        const Segment& s = segments_[static_cast<size_t>(chunk.segment_of[i])];
        const int64_t n = p.value.numel();
        const TensorView u = muon_->momentum_scratch(n), update = muon_->update_scratch(n);
        muon_momentum(s.m, u, grad_of(s), momentum);
        muon_->orthogonalize(p, u.reshape(p.value.shape), update.reshape(p.value.shape));
        muon_apply_to(s, update, lr, weight_decay);
      }
      continue;
    }
    // Distributed optimizer: this rank holds the momenta of its shard of each bucket; the bucket's
    // momentum inputs are gathered whole over dp (in place), then every rank orthogonalises every
    // matrix of the bucket and updates its own part.
    const DdpBufferLayout& layout = *chunk.shard.layout;
    Communicator& dp = *chunk.shard.dp;
    for (const DdpBucket& bucket : layout.buckets) {
      if (std::none_of(bucket.params.begin(), bucket.params.end(),
                       [&](int i) { return chunk.muon[static_cast<size_t>(i)]; }))
        continue;
      const TensorView whole = muon_bucket_.rows(0, bucket.range.numel());
      const BufferRange mine = bucket.shard(dp.rank(), dp.size());
      for (int i : bucket.params) {
        const int at = chunk.segment_of[static_cast<size_t>(i)];
        if (at < 0 || !chunk.muon[static_cast<size_t>(i)]) continue;
        const Segment& s = segments_[static_cast<size_t>(at)];
        const int64_t start = layout.params[static_cast<size_t>(i)].start - bucket.range.start + s.begin;
        muon_momentum(s.m, whole.rows(start, s.end - s.begin), grad_of(s), momentum);
      }
      dp.all_gather(whole, whole.rows(mine.start - bucket.range.start, mine.numel()));
      for (int i : bucket.params) {
        if (!chunk.muon[static_cast<size_t>(i)]) continue;
        const Param& p = params[static_cast<size_t>(i)];
        const int64_t n = p.value.numel();
        const TensorView u = whole.rows(layout.params[static_cast<size_t>(i)].start - bucket.range.start, n);
        const TensorView update = muon_->update_scratch(n);
        muon_->orthogonalize(p, u.reshape(p.value.shape), update.reshape(p.value.shape));
        const int at = chunk.segment_of[static_cast<size_t>(i)];
        if (at < 0) continue;
        const Segment& s = segments_[static_cast<size_t>(at)];
        muon_apply_to(s, update.rows(s.begin, s.end - s.begin), lr, weight_decay);
      }
    }
  }
}

}  // namespace mt
