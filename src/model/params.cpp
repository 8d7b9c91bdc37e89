#include "model/params.h"

#include <cmath>

#include "base/rng.h"

namespace mt {

namespace {

std::string layer_prefix(int64_t layer) { return "decoder.layers." + std::to_string(layer) + "."; }

bool is_decayed(const ParamSpec& spec) {
  const bool bias = spec.name.size() >= 5 && spec.name.compare(spec.name.size() - 5, 5, ".bias") == 0;
  return spec.shape.ndim >= 2 && !bias;
}

}  // namespace

bool is_embedding_or_output(const Param& p) {
  return p.name == "embedding.word_embeddings.weight" || p.name == "output_layer.weight";
}

bool is_qk_layernorm(const Param& p) {
  return p.name.find(".q_layernorm.") != std::string::npos || p.name.find(".k_layernorm.") != std::string::npos;
}

std::vector<ParamSpec> param_specs(const ModelConfig& c, const StageRange& range) {
  const int64_t h = c.hidden_size, v = c.padded_vocab_size();
  const bool layernorm = c.normalization == Normalization::layernorm;
  std::vector<ParamSpec> specs;
  const ShardSpec whole, rows{0, 1}, columns{1, 1};
  auto add = [&](std::string name, Shape shape, InitKind init, ShardSpec shard = {}) {
    specs.push_back({std::move(name), shape, init, shard});
  };
  // A norm's weights are whole on every tensor-parallel rank; `partial` when each rank computes
  // it on its own part of the rows (a sequence shard, its own heads), so the gradient is summed
  // over the tp group.
  auto add_norm = [&](const std::string& prefix, int64_t width, bool partial) {
    add(prefix + ".weight", {width}, c.layernorm_zero_centered_gamma ? InitKind::zeros : InitKind::ones);
    if (layernorm) add(prefix + ".bias", {width}, InitKind::zeros);
    for (size_t i = specs.size() - (layernorm ? 2 : 1); i < specs.size(); ++i) specs[i].partial_over_tp = partial;
  };
  // Column-parallel: output rows split (in `blocks` blocks: SwiGLU's gate and up halves each split
  // t ways, so every rank holds matching halves); row-parallel: input columns split, bias whole.
  auto add_column_parallel = [&](const std::string& prefix, int64_t out, int64_t in, InitKind init, int64_t blocks) {
    add(prefix + ".weight", {out, in}, init, {0, blocks});
    if (c.add_bias_linear) add(prefix + ".bias", {out}, InitKind::zeros, {0, blocks});
  };
  auto add_row_parallel = [&](const std::string& prefix, int64_t out, int64_t in, InitKind init) {
    add(prefix + ".weight", {out, in}, init, columns);
    if (c.add_bias_linear) add(prefix + ".bias", {out}, InitKind::zeros, whole);
  };
  // An MoE block: the router is whole on every tensor-parallel rank, each rank routing its own
  // sequence shard, so its gradient is a partial sum over the tp group, as the norms' are. The
  // routed experts are stacked [E, out, in] (entry e is Megatron's experts.linear_fc1.weight{e}),
  // split over the expert groups (ShardRanks). The shared expert is a dense MLP without biases.
  auto add_moe = [&](const std::string& p) {
    const int64_t E = c.moe.num_experts, gated = c.activation == Activation::swiglu ? 2 : 1;
    add(p + "router.weight", {E, h}, InitKind::normal);
    specs.back().partial_over_tp = c.sequence_parallel;
    add(p + "experts.linear_fc1.weight", {E, c.moe_fc1_size(), h}, InitKind::normal, {1, gated});
    specs.back().expert = true;
    add(p + "experts.linear_fc2.weight", {E, h, c.moe.ffn_hidden_size}, InitKind::scaled_normal, {2, 1});
    specs.back().expert = true;
    const int64_t shared = c.moe.shared_expert_intermediate_size;
    if (shared == 0) return;
    add(p + "shared_experts.linear_fc1.weight", {gated * shared, h}, InitKind::normal, {0, gated});
    add(p + "shared_experts.linear_fc2.weight", {h, shared}, InitKind::scaled_normal, columns);
  };

  if (range.embedding) {
    add("embedding.word_embeddings.weight", {v, h}, InitKind::normal, rows);
    // Tied to the output layer on another stage: one of the two copies.
    specs.back().shared_embedding = !c.untie_embeddings_and_output_weights && !range.head;
    if (c.has_position_table())
      add("embedding.position_embeddings.weight", {c.max_position_embeddings, h}, InitKind::normal);
  }
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    const std::string p = layer_prefix(i);
    add_norm(p + "input_layernorm", h, c.sequence_parallel);
    // The fused QKV rows are grouped by query group, so t contiguous row blocks give each rank
    // g/t whole groups with their query heads.
    add_column_parallel(p + "self_attention.linear_qkv", c.qkv_size(), h, InitKind::normal, 1);
    if (c.qk_layernorm) {  // each rank normalises its own heads (Megatron's finalize_model_grads sums them)
      add_norm(p + "self_attention.q_layernorm", c.kv_channels, true);
      add_norm(p + "self_attention.k_layernorm", c.kv_channels, true);
    }
    add_row_parallel(p + "self_attention.linear_proj", h, c.attention_size(), InitKind::scaled_normal);
    add_norm(p + "pre_mlp_layernorm", h, c.sequence_parallel);
    if (c.mlp_kind(i) == MlpKind::moe) {
      add_moe(p + "mlp.");
      continue;
    }
    add_column_parallel(p + "mlp.linear_fc1", c.fc1_size(), h, InitKind::normal,
                        c.activation == Activation::swiglu ? 2 : 1);
    add_row_parallel(p + "mlp.linear_fc2", h, c.ffn_hidden_size, InitKind::scaled_normal);
  }
  if (!range.head) return specs;
  add_norm("decoder.final_layernorm", h, c.sequence_parallel);
  if (c.untie_embeddings_and_output_weights) {
    add("output_layer.weight", {v, h}, InitKind::normal, rows);
  } else if (!range.embedding) {
    // The tied output layer on a stage without the embedding: a copy under the embedding's name,
    // so it is initialised identically.
    add("embedding.word_embeddings.weight", {v, h}, InitKind::normal, rows);
    specs.back().shared_embedding = true;
  }
  return specs;
}


ParamStore::ParamStore(const ModelConfig& config, Backend& backend, MemoryTracker* tracker, int tp_rank)
    : ParamStore(config, StageRange::whole(config), backend, tracker, tp_rank) {}

Shape ShardRanks::Split::local(const Shape& whole) const {
  Shape s = shard_shape(whole, shard, size);
  MT_CHECK(s.dims[0] % parts == 0) << "cannot split the " << s.dims[0] << " experts of " << whole.str() << " over "
                                   << parts << " expert-parallel ranks";
  s.dims[0] /= parts;
  return s;
}

ShardRanks::Split ShardRanks::of(const ParamSpec& spec) const {
  if (!spec.expert) return {spec.shard, tp, tp_rank};
  return {spec.shard, etp, etp_rank, ep, ep_rank};
}

ShardRanks shard_sizes(const ModelConfig& c) {
  ShardRanks r;
  r.tp = static_cast<int>(c.tensor_model_parallel_size);
  if (c.moe.enabled()) {
    r.ep = static_cast<int>(c.moe.expert_model_parallel_size);
    r.etp = static_cast<int>(c.moe.expert_tensor_parallel_size);
  }
  return r;
}

DdpConfig expert_ddp(const ModelConfig& c, const DdpConfig& dense) {
  const ShardRanks r = shard_sizes(c);
  DdpConfig ddp = dense;
  const int64_t ranks = static_cast<int64_t>(dense.data_parallel_size) * r.tp;
  MT_CHECK(ranks % (r.ep * r.etp) == 0) << "data-parallel size " << dense.data_parallel_size << " x tensor-parallel "
                                        << r.tp << " is not divisible by expert-parallel " << r.ep
                                        << " x expert tensor-parallel " << r.etp;
  ddp.data_parallel_size = static_cast<int>(ranks / (r.ep * r.etp));
  MT_CHECK(ddp.data_parallel_size % dense.num_distributed_optimizer_instances == 0)
      << "--num-distributed-optimizer-instances " << dense.num_distributed_optimizer_instances
      << " does not divide the expert-data-parallel size " << ddp.data_parallel_size << "; choose a divisor of it";
  return ddp;
}

std::vector<ParamSpec> param_subset(const std::vector<ParamSpec>& specs, ParamSet set) {
  std::vector<ParamSpec> subset;
  for (const ParamSpec& s : specs)
    if (set == ParamSet::all || s.expert == (set == ParamSet::experts)) subset.push_back(s);
  return subset;
}

ParamStore::ParamStore(const ModelConfig& config, StageRange range, Backend& backend, MemoryTracker* tracker,
                       int tp_rank, const DdpConfig& ddp)
    : ParamStore(config, range, backend, tracker,
                 ShardRanks{static_cast<int>(config.tensor_model_parallel_size), tp_rank}, ddp, ParamSet::all) {}

ParamStore::ParamStore(const ModelConfig& config, StageRange range, Backend& backend, MemoryTracker* tracker,
                       const ShardRanks& ranks, const DdpConfig& ddp, ParamSet set)
    : config_(config), range_(range), backend_(backend), ranks_(ranks) {
  const int t = static_cast<int>(config_.tensor_model_parallel_size);
  MT_CHECK(ranks.tp == t && ranks.tp_rank >= 0 && ranks.tp_rank < t)
      << "tensor-parallel rank " << ranks.tp_rank << " of " << ranks.tp << " for --tensor-model-parallel-size " << t;
  range_.validate(config_);
  const std::vector<ParamSpec> specs = param_subset(param_specs(config_, range_), set);
  layout_ = param_buffer_layout(specs, ddp, ranks);
  // One value buffer and one gradient buffer, each parameter at its layout offset in both (the
  // padding Megatron's layout leaves between them stays zero).
  const auto buffer = [&](DType dtype, MemCategory category, std::unique_ptr<Arena>& arena) {
    const size_t bytes = static_cast<size_t>(layout_.numel) * dtype_size(dtype);
    arena = std::make_unique<Arena>(backend, category, (bytes + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign,
                                    tracker);
    const TensorView flat = arena->alloc(dtype, {layout_.numel});
    arena->zero_used();
    return flat;
  };
  value_buffer_ = buffer(config_.params_dtype, MemCategory::weights, value_arena_);
  const TensorView values = value_buffer_;
  grad_buffer_ = buffer(DType::f32, MemCategory::grads, grad_arena_);
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    const ShardRanks::Split split = ranks.of(s);
    const Shape local = split.local(s.shape);
    const BufferRange at = layout_.params[i];
    params_.push_back({s.name, values.rows(at.start, at.numel()).reshape(local),
                       grad_buffer_.rows(at.start, at.numel()).reshape(local), s.init, is_decayed(s), s.shape,
                       split.shard, split.size, split.rank, split.offset(s.shape), s.partial_over_tp && t > 1,
                       s.shared_embedding, s.shared_embedding && !range.embedding, at.start, s.expert});
  }
  // Parameters are registered embedding, layer by layer, head: find where each group starts.
  size_t index = 0;
  while (index < params_.size() && params_[index].name.rfind("embedding.", 0) == 0 && range_.embedding) ++index;
  for (int64_t i = range_.first_layer; i < range_.last_layer; ++i) {
    layer_begin_.push_back(index);
    while (index < params_.size() && params_[index].name.rfind(layer_prefix(i), 0) == 0) ++index;
  }
  layer_begin_.push_back(index);
  values_ = collect(false);
  grads_ = collect(true);
}

void ParamStore::init(uint64_t seed) {
  const double sigma = config_.init_method_std;
  const double scaled_sigma = sigma / std::sqrt(2.0 * static_cast<double>(config_.num_layers));
  std::vector<float> host;
  std::vector<uint16_t> host16;
  for (Param& p : params_) {
    host.resize(static_cast<size_t>(p.value.numel()));
    const RngStream rng{seed, stream_id(p.name)};
    const double std = p.init == InitKind::scaled_normal ? scaled_sigma : sigma;
    const auto n = static_cast<int64_t>(host.size());
    // Each value is a pure function of (seed, name, whole-tensor index), so threads may draw in
    // any order and every parallel layout starts from the same weights.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const auto index = static_cast<uint64_t>(
          shard_global_index(p.full_shape, p.shard, p.shard_size, p.shard_rank, p.shard_offset + i));
      switch (p.init) {
        case InitKind::normal:
        case InitKind::scaled_normal: host[i] = static_cast<float>(std * rng.normal(index)); break;
        case InitKind::ones: host[i] = 1.0f; break;
        case InitKind::zeros: host[i] = 0.0f; break;
      }
    }
    if (p.value.dtype == DType::f32) {
      backend_.copy_from_host(p.value.data, host.data(), p.value.bytes());
      continue;
    }
    host16.resize(host.size());
    for (size_t i = 0; i < host.size(); ++i)
      host16[i] = p.value.dtype == DType::bf16 ? f32_to_bf16(host[i]) : f32_to_f16(host[i]);
    backend_.copy_from_host(p.value.data, host16.data(), p.value.bytes());
  }
}

void ParamStore::zero_grads() { grad_arena_->zero_used(); }

Param& ParamStore::get(const std::string& name) {
  for (Param& p : params_)
    if (p.name == name) return p;
  std::string known;
  for (const Param& p : params_) known += "\n  " + p.name;
  MT_FAIL() << "no parameter named '" << name << "'; the model has:" << known;
}

TensorView ParamStore::bucket_grads(size_t bucket) const {
  const BufferRange r = layout_.buckets.at(bucket).range;
  return grad_buffer_.rows(r.start, r.numel());
}

ParamStore::IndexRange ParamStore::layer_params(int64_t layer) const {
  MT_CHECK(layer >= range_.first_layer && layer < range_.last_layer)
      << "layer " << layer << " is not in this stage's [" << range_.first_layer << ", " << range_.last_layer << ")";
  const size_t k = static_cast<size_t>(layer - range_.first_layer);
  return {layer_begin_[k], layer_begin_[k + 1]};
}

TensorView ParamStore::bucket_values(size_t bucket) const {
  const BufferRange r = layout_.buckets.at(bucket).range;
  return value_buffer_.rows(r.start, r.numel());
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (const Param& p : params_) n += p.value.numel();
  return n;
}

DdpBufferLayout param_buffer_layout(const std::vector<ParamSpec>& specs, const DdpConfig& ddp, const ShardRanks& ranks) {
  std::vector<LayoutParam> sizes;
  for (const ParamSpec& s : specs) sizes.push_back({ranks.of(s).local(s.shape).numel(), s.shared_embedding});
  return ddp_buffer_layout(sizes, ddp);
}

GptTensors gpt_tensors(const ModelConfig& c, const StageRange& range,
                       const std::function<TensorView(const std::string&)>& find) {
  GptTensors t;
  if (range.embedding) {  // off the first stage, a tied copy serves the output layer only
    t.word_embeddings = find("embedding.word_embeddings.weight");
    t.position_embeddings = find("embedding.position_embeddings.weight");
  }
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    const std::string p = layer_prefix(i);
    LayerWeights l;
    l.input_norm = {find(p + "input_layernorm.weight"), find(p + "input_layernorm.bias")};
    l.attention = {find(p + "self_attention.linear_qkv.weight"), find(p + "self_attention.linear_qkv.bias"),
                   find(p + "self_attention.linear_proj.weight"), find(p + "self_attention.linear_proj.bias"),
                   {find(p + "self_attention.q_layernorm.weight"), find(p + "self_attention.q_layernorm.bias")},
                   {find(p + "self_attention.k_layernorm.weight"), find(p + "self_attention.k_layernorm.bias")}};
    l.mlp_norm = {find(p + "pre_mlp_layernorm.weight"), find(p + "pre_mlp_layernorm.bias")};
    l.mlp = {find(p + "mlp.linear_fc1.weight"), find(p + "mlp.linear_fc1.bias"), find(p + "mlp.linear_fc2.weight"),
             find(p + "mlp.linear_fc2.bias")};
    l.moe.router_weight = find(p + "mlp.router.weight");
    l.moe.experts_fc1 = find(p + "mlp.experts.linear_fc1.weight");
    l.moe.experts_fc2 = find(p + "mlp.experts.linear_fc2.weight");
    l.moe.shared.fc1_weight = find(p + "mlp.shared_experts.linear_fc1.weight");
    l.moe.shared.fc2_weight = find(p + "mlp.shared_experts.linear_fc2.weight");
    t.layers.push_back(l);
  }
  if (!range.head) return t;
  t.final_norm_weight = find("decoder.final_layernorm.weight");
  t.final_norm_bias = find("decoder.final_layernorm.bias");
  t.output_weight = find(c.untie_embeddings_and_output_weights ? "output_layer.weight" : "embedding.word_embeddings.weight");
  return t;
}

GptTensors param_shapes(const ModelConfig& c, const StageRange& range, const ShardRanks& ranks) {
  Arena measuring(MemCategory::weights);
  std::vector<std::pair<std::string, TensorView>> views;
  for (const ParamSpec& s : param_specs(c, range))
    views.emplace_back(s.name, measuring.alloc(c.params_dtype, ranks.of(s).local(s.shape)));
  return gpt_tensors(c, range, [&](const std::string& name) {
    for (const auto& [n, v] : views)
      if (n == name) return v;
    return TensorView();
  });
}

GptTensors ParamStore::collect(bool grads) const {
  return gpt_tensors(config_, range_, [&](const std::string& name) {
    for (const Param& p : params_)
      if (p.name == name) return grads ? p.grad : p.value;
    return TensorView();
  });
}

}  // namespace mt
