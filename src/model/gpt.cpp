#include "model/gpt.h"

#include <omp.h>

#include <algorithm>
#include <utility>

#include "model/layers/norm_act.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "parallel/mappings.h"

namespace mt {

namespace {
constexpr TensorView LayerTensors::*kLayerWeights[] = {
    &LayerTensors::input_norm_weight, &LayerTensors::input_norm_bias, &LayerTensors::qkv_weight,
    &LayerTensors::qkv_bias,          &LayerTensors::proj_weight,     &LayerTensors::proj_bias,
    &LayerTensors::mlp_norm_weight,   &LayerTensors::mlp_norm_bias,   &LayerTensors::fc1_weight,
    &LayerTensors::fc1_bias,          &LayerTensors::fc2_weight,      &LayerTensors::fc2_bias};
}  // namespace

GptModel::GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
                   const GptModelOptions& options)
    : config_(config), local_(config.tp_local()), s_(config.seq_length), b_(micro_batch), backend_(backend) {
  MT_CHECK(micro_batch > 0) << "--micro-batch-size must be positive, got " << micro_batch;
  MT_CHECK(config.kv_channels > 0 && config.num_query_groups > 0 && config.ffn_hidden_size > 0 &&
           config.max_position_embeddings > 0)
      << "GptModel needs a finalized ModelConfig (call ModelConfig::finalize() first)";
  MT_CHECK(options.head_chunk_tokens > 0) << "head_chunk_tokens must be positive";
  tp_ = TensorParallel{options.tp_comm, config.sequence_parallel};
  MT_CHECK(tp_.size() == config.tensor_model_parallel_size)
      << "the tensor-parallel group has " << tp_.size() << " ranks but --tensor-model-parallel-size is "
      << config.tensor_model_parallel_size;
  local_rows_ = tp_.local_rows(s_ * b_);
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  head_chunk_ = std::min(options.head_chunk_tokens, s_ * b_);
  params_ = std::make_unique<ParamStore>(config_, backend, tracker, tp_.rank());
  // Run the carving once on measuring arenas to learn the exact sizes, then for real.
  Arena measure_act(MemCategory::activations), measure_ws(MemCategory::workspace);
  carve(measure_act, measure_ws, threads);
  activations_ = std::make_unique<Arena>(backend, MemCategory::activations, measure_act.used(), tracker);
  workspace_ = std::make_unique<Arena>(backend, MemCategory::workspace, measure_ws.used(), tracker);
  carve(*activations_, *workspace_, threads);
  activations_->zero_used();
  workspace_->zero_used();
  if (!rope_cos_.empty()) rope_tables(rope_cos_, rope_sin_, config_.rotary_base);
  for (auto* v : {&mask_sb_, &host_dlosses_, &host_losses_}) v->resize(static_cast<size_t>(s_ * b_));
  host_labels_.resize(static_cast<size_t>(s_ * b_));
}

void GptModel::carve(Arena& act, Arena& ws, int threads) {
  const int64_t N = s_ * b_, Nl = local_rows_, h = config_.hidden_size, V = config_.padded_vocab_size() / tp_.size();
  const LayerShape shape = layer_context(0).shape;
  tokens_ = ws.alloc(DType::i32, {b_, s_});
  positions_ = ws.alloc(DType::i32, {b_, s_});
  doc_start_ = ws.alloc(DType::i32, {b_, s_});
  labels_ = ws.alloc(DType::i32, {N});
  const DType dtype = config_.params_dtype;
  emb_drop_mask_ = act.alloc(DType::u8, {Nl, h});
  x0_ = act.alloc(dtype, {Nl, h});
  // Layers under full recomputation keep only their output; their other activations live in a
  // pool with one slot per layer of a recompute group, refilled by the backward. Only a group's
  // last output stays (it is the next group's input); inner outputs live in the pool, as in
  // Megatron, which keeps just each group's input.
  std::vector<LayerActivations> pool;
  const int64_t largest_group = config_.recompute_group_first(0) < 0 ? 0 : config_.recompute_group_size(0);
  layers_.clear();
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    const int64_t first = config_.recompute_group_first(i);
    if (first < 0) {
      layers_.push_back(alloc_layer_activations(act, local_, shape, dtype));
      continue;
    }
    const int64_t slot = i - first;
    while (static_cast<int64_t>(pool.size()) <= slot) {
      const bool inner = static_cast<int64_t>(pool.size()) < largest_group - 1;  // has a successor in its group
      pool.push_back(alloc_layer_activations(act, local_, shape, dtype, inner));
    }
    LayerActivations layer = pool[slot];
    if (i == first + config_.recompute_group_size(first) - 1) layer.out = act.alloc(dtype, {Nl, h});
    layers_.push_back(layer);
  }
  if (config_.normalization == Normalization::layernorm) final_mean_ = act.alloc(DType::f32, {Nl});
  final_rstd_ = act.alloc(DType::f32, {Nl});
  // Without sequence parallelism the output layer's input gradient is a [N, h] partial sum here
  // until its all-reduce; with it the partial sums go to scratch and this keeps the local rows.
  dfinal_ = act.alloc(DType::f32, {Nl, h});
  losses_ = act.alloc(DType::f32, {N});
  // The output head runs between the last layer's forward and the first layer backward, so its
  // logits chunk and the layers' scratch are never alive together.
  ws.overlay({[&] { scratch_ = alloc_layer_scratch(ws, local_, shape, threads); },
              [&] { logits_chunk_ = ws.alloc(DType::f32, {head_chunk_, V}); }});
  if (tp_.sp()) {
    scratch_.sp_gathered = ws.alloc(DType::f32, {N, h});
    scratch_.sp_partial = ws.alloc(DType::f32, {N, h});
  }
  final_out_ = ws.alloc(DType::f32, {Nl, h});
  lse_ = ws.alloc(DType::f32, {head_chunk_});
  if (tp_.active())
    for (TensorView* t : {&ce_.row_max, &ce_.sum_exp, &ce_.target}) *t = ws.alloc(DType::f32, {head_chunk_});
  dlosses_ = ws.alloc(DType::f32, {N});
  dx_ = ws.alloc(DType::f32, {Nl, h});
  if (config_.position_embedding_type == PositionEmbedding::rope) {
    rope_cos_ = ws.alloc(DType::f32, {config_.max_position_embeddings, config_.kv_channels / 2});
    rope_sin_ = ws.alloc(DType::f32, {config_.max_position_embeddings, config_.kv_channels / 2});
  }
  if (mixed()) {
    const GptTensors& w = params_->values();
    for (auto m : kLayerWeights)
      if (!(w.layers[0].*m).empty()) layer_w32_.*m = ws.alloc(DType::f32, (w.layers[0].*m).shape);
    // The f32 output goes to x32_ (ping-pong), never to this staging.
    for (auto m : kStoredActivations)
      if (m != &LayerActivations::out && (layers_[0].*m).ndim() > 0)  // a shape: measuring views have no data
        layer_act32_.*m = ws.alloc(DType::f32, (layers_[0].*m).shape);
    vocab_w32_ = ws.alloc(DType::f32, {V, h});
    if (!w.position_embeddings.empty()) pos_w32_ = ws.alloc(DType::f32, w.position_embeddings.shape);
    final_w32_ = ws.alloc(DType::f32, {h});
    if (!w.final_norm_bias.empty()) final_b32_ = ws.alloc(DType::f32, {h});
    x32_[0] = ws.alloc(DType::f32, {Nl, h});
    x32_[1] = ws.alloc(DType::f32, {Nl, h});
  }
}

TensorView GptModel::as_f32(const TensorView& t, const TensorView& staging) {
  if (t.empty() || t.dtype == DType::f32) return t;
  cast(staging, t);
  return staging;
}

LayerTensors GptModel::layer_weights_f32(const GptTensors& w, int64_t i) {
  if (!mixed()) return w.layers[i];
  LayerTensors out;
  for (auto m : kLayerWeights) out.*m = as_f32(w.layers[i].*m, layer_w32_.*m);
  return out;
}

TensorView GptModel::layer_fwd(const GptTensors& w, int64_t i, const TensorView& x, bool with_output) {
  LayerActivations act = layer_activations_f32(i, false);
  if (mixed()) act.out = x32_[(i + 1) % 2];  // ping-pong with the input, which stays valid
  transformer_layer_fwd(layer_context(i), layer_weights_f32(w, i), x, act, scratch_, with_output);
  if (mixed())
    for (auto m : kStoredActivations)
      if ((with_output || m != &LayerActivations::out) && !(layers_[i].*m).empty()) cast(layers_[i].*m, act.*m);
  return with_output ? act.out : TensorView();
}

LayerActivations GptModel::layer_activations_f32(int64_t i, bool load) {
  if (!mixed()) return layers_[i];
  LayerActivations f = layers_[i];
  for (auto m : kStoredActivations) {
    if (m == &LayerActivations::out) continue;  // the backward never reads it; the forward uses x32_
    f.*m = load ? as_f32(layers_[i].*m, layer_act32_.*m) : layer_act32_.*m;
  }
  return f;
}

LayerContext GptModel::layer_context(int64_t layer) const {
  LayerContext ctx;
  ctx.config = &local_;
  ctx.shape = {s_, b_, tp_.sp() ? tp_.size() : 1};
  ctx.tp = tp_;
  ctx.total_heads = config_.num_attention_heads;
  ctx.rope_cos = rope_cos_;
  ctx.rope_sin = rope_sin_;
  ctx.positions = positions();
  ctx.key_start = has_doc_start_ ? doc_start_ : TensorView();
  ctx.seed = seed_;
  ctx.dropout_round = round_;
  ctx.dropout = dropout_;
  ctx.layer_index = layer;
  ctx.act_dtype = config_.params_dtype;
  return ctx;
}

LossSums GptModel::forward(const MicroBatch& batch, const ForwardOptions& options) {
  const char* op = "GptModel::forward";
  check_shape(batch.tokens, {b_, s_}, op, "tokens");
  check_shape(batch.labels, {b_, s_}, op, "labels");
  check_dtype(batch.tokens, DType::i32, op, "tokens");
  check_dtype(batch.labels, DType::i32, op, "labels");
  if (!batch.loss_mask.empty()) {
    check_shape(batch.loss_mask, {b_, s_}, op, "loss_mask");
    check_dtype(batch.loss_mask, DType::f32, op, "loss_mask");
  }
  for (auto [t, name] : {std::pair{&batch.position_ids, "position_ids"}, {&batch.document_start, "document_start"}}) {
    if (t->empty()) continue;
    check_shape(*t, {b_, s_}, op, name);
    check_dtype(*t, DType::i32, op, name);
  }
  MT_CHECK(batch.tokens.device == Device::cpu && batch.labels.device == Device::cpu &&
           batch.loss_mask.device == Device::cpu && batch.position_ids.device == Device::cpu &&
           batch.document_start.device == Device::cpu)
      << op << ": the micro-batch must be in host memory";
  // A training forward computes the output layer's gradient at once; a second forward before its
  // backward would silently lose the rest of that micro-batch's gradient.
  MT_CHECK(grad_scale_ == 0.0f) << op << ": the previous training forward has not had its backward() yet";
  round_ = options.dropout_round;
  dropout_ = options.dropout;
  grad_scale_ = options.grad_scale;
  const int64_t N = s_ * b_;

  // Inputs: tokens as given; labels and the loss mask transposed to the [s, b] row order.
  backend_.copy_from_host(tokens_.data, batch.tokens.data, batch.tokens.bytes());
  has_positions_ = !batch.position_ids.empty();
  if (has_positions_) backend_.copy_from_host(positions_.data, batch.position_ids.data, batch.position_ids.bytes());
  has_doc_start_ = !batch.document_start.empty();
  if (has_doc_start_) backend_.copy_from_host(doc_start_.data, batch.document_start.data, batch.document_start.bytes());
  std::vector<int32_t>& labels_sb = host_labels_;
  std::vector<float>& dlosses = host_dlosses_;
  LossSums sums;
  for (int64_t j = 0; j < b_; ++j)
    for (int64_t i = 0; i < s_; ++i) {
      const int32_t label = batch.labels.i32()[j * s_ + i];
      // Checked here, identically on every rank: under tensor parallelism no single shard of the
      // cross entropy sees the whole vocabulary, so none of them could tell.
      MT_CHECK(label >= 0 && label < config_.padded_vocab_size())
          << op << ": labels[" << j << ", " << i << "] = " << label << " is out of range [0, "
          << config_.padded_vocab_size() << ") (the padded vocabulary)";
      labels_sb[i * b_ + j] = label;
      const float m = batch.loss_mask.empty() ? 1.0f : batch.loss_mask.f32()[j * s_ + i];
      mask_sb_[i * b_ + j] = m;
      dlosses[i * b_ + j] = m * grad_scale_;
      sums.num_tokens += m;
    }
  backend_.copy_from_host(labels_.data, labels_sb.data(), labels_.bytes());
  backend_.copy_from_host(dlosses_.data, dlosses.data(), dlosses_.bytes());

  const GptTensors& w = params_->values();
  const DType dtype = config_.params_dtype;
  const TensorView emb = scratch_.dense;  // [Nl, h] transient
  vocab_parallel_embedding_fwd(tp_, emb, tokens_, as_f32(w.word_embeddings, vocab_w32_),
                               as_f32(w.position_embeddings, pos_w32_), vocab_shard(), scratch_.sp_partial,
                               positions());
  round_to_dtype(emb, dtype);
  TensorView x = mixed() ? x32_[0] : x0_;
  dropout_fwd(x, emb_drop_mask_, emb, dropout_ ? config_.hidden_dropout : 0.0f,
              dropout_stream(seed_, round_, -1, "embedding"),
              static_cast<uint64_t>(tp_.first_row(N) * config_.hidden_size));
  round_to_dtype(x, dtype);
  if (mixed()) cast(x0_, x);
  for (int64_t i = 0; i < config_.num_layers; ++i) x = layer_fwd(w, i, x);
  norm_fwd(config_, final_out_, final_mean_, final_rstd_, x, as_f32(w.final_norm_weight, final_w32_),
           as_f32(w.final_norm_bias, final_b32_));
  round_to_dtype(final_out_, dtype);
  output_head_fwd(grad_scale_);

  std::vector<float>& losses = host_losses_;
  backend_.copy_to_host(losses.data(), losses_.data, losses_.bytes());
  for (int64_t n = 0; n < N; ++n) sums.loss_sum += static_cast<double>(mask_sb_[n]) * losses[n];
  return sums;
}

VocabShard GptModel::vocab_shard() const {
  const int64_t rows = config_.padded_vocab_size() / tp_.size();
  return {tp_.rank() * rows, config_.padded_vocab_size()};
}

void GptModel::output_head_fwd(float grad_scale) {
  const int64_t N = s_ * b_;
  const GptTensors& w = params_->values();
  const GptTensors& g = params_->grads();
  const TensorView output_weight = as_f32(w.output_weight, vocab_w32_);
  const int64_t vocab_start = vocab_shard().start;
  // The output layer is column parallel over the vocabulary: its input is the whole sequence
  // (gathered under sequence parallelism) and its input gradient a partial sum over the shards.
  TensorView input = final_out_, dinput = dfinal_;
  if (tp_.sp()) {
    gather_from_sp_fwd(tp_, scratch_.sp_gathered, final_out_);
    input = scratch_.sp_gathered;
    dinput = scratch_.sp_partial;
  }
  if (grad_scale != 0.0f) zero(dinput);
  for (int64_t r0 = 0; r0 < N; r0 += head_chunk_) {
    const int64_t rows = std::min(head_chunk_, N - r0);
    const TensorView x = input.rows(r0, rows), logits = logits_chunk_.rows(0, rows);
    const TensorView labels = labels_.rows(r0, rows), lse = lse_.rows(0, rows);
    linear_fwd(logits, x, output_weight, TensorView());
    round_to_dtype(logits, config_.params_dtype);  // Megatron's logits are 16-bit; the loss is f32
    vocab_parallel_cross_entropy_fwd(tp_, losses_.rows(r0, rows), lse, logits, labels, vocab_start, ce_);
    if (grad_scale == 0.0f) continue;
    // The loss is the end of the graph, so its gradient is known now: turn the logits into
    // dlogits in place and push them through the output layer before the next chunk reuses them.
    vocab_parallel_cross_entropy_bwd(tp_, logits, dlosses_.rows(r0, rows), logits, lse, labels, vocab_start);
    round_to_dtype(logits, config_.params_dtype);
    linear_bwd(dinput.rows(r0, rows), g.output_weight, TensorView(), logits, x, output_weight);
  }
  if (grad_scale == 0.0f) return;
  if (tp_.sp())
    gather_from_sp_bwd(tp_, dfinal_, dinput);
  else
    copy_to_tp_bwd(tp_, dfinal_);
  round_to_dtype(dfinal_, config_.params_dtype);
}

void GptModel::backward() {
  MT_CHECK(grad_scale_ != 0.0f) << "GptModel::backward needs a forward with a nonzero grad_scale";
  const GptTensors& w = params_->values();
  const GptTensors& g = params_->grads();
  zero(dx_);
  const TensorView last = config_.num_layers > 0 ? layers_.back().out : x0_;
  norm_bwd(config_, dx_, g.final_norm_weight, g.final_norm_bias, dfinal_, as_f32(last, x32_[1]),
           as_f32(w.final_norm_weight, final_w32_), final_mean_, final_rstd_);
  round_to_dtype(dx_, config_.params_dtype);
  auto input = [&](int64_t i, const TensorView& staging) { return as_f32(i == 0 ? x0_ : layers_[i - 1].out, staging); };
  for (int64_t i = config_.num_layers - 1; i >= 0; --i) {
    const int64_t first = config_.recompute_group_first(i);
    if (first >= 0 && i == first + config_.recompute_group_size(first) - 1) {
      // Rerun the group's forward from its saved input: same weights, same dropout masks. The
      // last layer's output is saved, so its rerun stops short of fc2.
      TensorView x = input(first, x32_[first % 2]);
      for (int64_t j = first; j <= i; ++j) x = layer_fwd(w, j, x, /*with_output=*/j < i);
    }
    const TensorView x = input(i, x32_[0]);
    transformer_layer_bwd(layer_context(i), layer_weights_f32(w, i), g.layers[i], x, layer_activations_f32(i, true),
                          scratch_, dx_);
  }
  const TensorView demb = scratch_.dense;
  zero(demb);
  dropout_bwd(demb, dx_, emb_drop_mask_, dropout_ ? config_.hidden_dropout : 0.0f);
  round_to_dtype(demb, config_.params_dtype);
  vocab_parallel_embedding_bwd(tp_, g.word_embeddings, g.position_embeddings, demb, tokens_, vocab_shard(),
                               scratch_.sp_gathered, positions());
  grad_scale_ = 0.0f;  // one backward per forward
}

}  // namespace mt
