#include "model/gpt.h"

#include <omp.h>

#include <algorithm>

#include "model/layers/norm_act.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear.h"

namespace mt {

GptModel::GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
                   const GptModelOptions& options)
    : config_(config), s_(config.seq_length), b_(micro_batch), backend_(backend) {
  MT_CHECK(micro_batch > 0) << "--micro-batch-size must be positive, got " << micro_batch;
  MT_CHECK(options.head_chunk_tokens > 0) << "head_chunk_tokens must be positive";
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  head_chunk_ = std::min(options.head_chunk_tokens, s_ * b_);
  params_ = std::make_unique<ParamStore>(config_, backend, tracker);
  // Run the carving once on measuring arenas to learn the exact sizes, then for real.
  Arena measure_act(MemCategory::activations), measure_ws(MemCategory::workspace);
  carve(measure_act, measure_ws, threads);
  activations_ = std::make_unique<Arena>(backend, MemCategory::activations, measure_act.used(), tracker);
  workspace_ = std::make_unique<Arena>(backend, MemCategory::workspace, measure_ws.used(), tracker);
  carve(*activations_, *workspace_, threads);
  activations_->zero_used();
  workspace_->zero_used();
  if (!rope_cos_.empty()) rope_tables(rope_cos_, rope_sin_, config_.rotary_base);
  mask_sb_.resize(static_cast<size_t>(s_ * b_));
}

void GptModel::carve(Arena& act, Arena& ws, int threads) {
  const int64_t N = s_ * b_, h = config_.hidden_size, V = config_.padded_vocab_size();
  const LayerShape shape{s_, b_};
  tokens_ = ws.alloc(DType::i32, {b_, s_});
  labels_ = ws.alloc(DType::i32, {N});
  emb_drop_mask_ = act.alloc(DType::u8, {N, h});
  x0_ = act.alloc(DType::f32, {N, h});
  layers_.clear();
  for (int64_t i = 0; i < config_.num_layers; ++i) layers_.push_back(alloc_layer_activations(act, config_, shape));
  if (config_.normalization == Normalization::layernorm) final_mean_ = act.alloc(DType::f32, {N});
  final_rstd_ = act.alloc(DType::f32, {N});
  dfinal_ = act.alloc(DType::f32, {N, h});
  losses_ = act.alloc(DType::f32, {N});
  scratch_ = alloc_layer_scratch(ws, config_, shape, threads);
  final_out_ = ws.alloc(DType::f32, {N, h});
  logits_chunk_ = ws.alloc(DType::f32, {head_chunk_, V});
  lse_ = ws.alloc(DType::f32, {head_chunk_});
  dlosses_ = ws.alloc(DType::f32, {N});
  dx_ = ws.alloc(DType::f32, {N, h});
  if (config_.position_embedding_type == PositionEmbedding::rope) {
    rope_cos_ = ws.alloc(DType::f32, {config_.max_position_embeddings, config_.kv_channels / 2});
    rope_sin_ = ws.alloc(DType::f32, {config_.max_position_embeddings, config_.kv_channels / 2});
  }
}

LayerContext GptModel::layer_context(int64_t layer) const {
  LayerContext ctx;
  ctx.config = &config_;
  ctx.shape = {s_, b_};
  ctx.rope_cos = rope_cos_;
  ctx.rope_sin = rope_sin_;
  ctx.seed = seed_;
  ctx.dropout_round = round_;
  ctx.dropout = dropout_;
  ctx.layer_index = layer;
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
  MT_CHECK(batch.tokens.device == Device::cpu && batch.labels.device == Device::cpu && batch.loss_mask.device == Device::cpu)
      << op << ": the micro-batch must be in host memory";
  round_ = options.dropout_round;
  dropout_ = options.dropout;
  grad_scale_ = options.grad_scale;
  const int64_t N = s_ * b_;

  // Inputs: tokens as given; labels and the loss mask transposed to the [s, b] row order.
  backend_.copy_from_host(tokens_.data, batch.tokens.data, batch.tokens.bytes());
  std::vector<int32_t> labels_sb(static_cast<size_t>(N));
  std::vector<float> dlosses(static_cast<size_t>(N));
  LossSums sums;
  for (int64_t j = 0; j < b_; ++j)
    for (int64_t i = 0; i < s_; ++i) {
      labels_sb[i * b_ + j] = batch.labels.i32()[j * s_ + i];
      const float m = batch.loss_mask.empty() ? 1.0f : batch.loss_mask.f32()[j * s_ + i];
      mask_sb_[i * b_ + j] = m;
      dlosses[i * b_ + j] = m * grad_scale_;
      sums.num_tokens += m;
    }
  backend_.copy_from_host(labels_.data, labels_sb.data(), labels_.bytes());
  backend_.copy_from_host(dlosses_.data, dlosses.data(), dlosses_.bytes());

  const GptTensors w = params_->values();
  const TensorView emb = scratch_.dense;  // [N, h] transient
  embedding_fwd(emb.reshape({s_, b_, config_.hidden_size}), tokens_, TensorView(), w.word_embeddings,
                w.position_embeddings);
  dropout_fwd(x0_, emb_drop_mask_, emb, dropout_ ? config_.hidden_dropout : 0.0f,
              dropout_stream(seed_, round_, -1, "embedding"), 0);
  TensorView x = x0_;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    transformer_layer_fwd(layer_context(i), w.layers[i], x, layers_[i], scratch_);
    x = layers_[i].out;
  }
  norm_fwd(config_, final_out_, final_mean_, final_rstd_, x, w.final_norm_weight, w.final_norm_bias);
  output_head_fwd(grad_scale_);

  std::vector<float> losses(static_cast<size_t>(N));
  backend_.copy_to_host(losses.data(), losses_.data, losses_.bytes());
  for (int64_t n = 0; n < N; ++n) sums.loss_sum += static_cast<double>(mask_sb_[n]) * losses[n];
  return sums;
}

void GptModel::output_head_fwd(float grad_scale) {
  const int64_t N = s_ * b_;
  const GptTensors w = params_->values();
  const GptTensors g = params_->grads();
  if (grad_scale != 0.0f) zero(dfinal_);
  for (int64_t r0 = 0; r0 < N; r0 += head_chunk_) {
    const int64_t rows = std::min(head_chunk_, N - r0);
    const TensorView x = final_out_.rows(r0, rows), logits = logits_chunk_.rows(0, rows);
    const TensorView labels = labels_.rows(r0, rows), lse = lse_.rows(0, rows);
    linear_fwd(logits, x, w.output_weight, TensorView());
    cross_entropy_fwd(losses_.rows(r0, rows), lse, logits, labels);
    if (grad_scale == 0.0f) continue;
    // The loss is the end of the graph, so its gradient is known now: turn the logits into
    // dlogits in place and push them through the output layer before the next chunk reuses them.
    cross_entropy_bwd(logits, dlosses_.rows(r0, rows), logits, lse, labels);
    linear_bwd(dfinal_.rows(r0, rows), g.output_weight, TensorView(), logits, x, w.output_weight);
  }
}

void GptModel::backward() {
  MT_CHECK(grad_scale_ != 0.0f) << "GptModel::backward needs a forward with a nonzero grad_scale";
  const GptTensors w = params_->values();
  const GptTensors g = params_->grads();
  zero(dx_);
  const TensorView last = config_.num_layers > 0 ? layers_.back().out : x0_;
  norm_bwd(config_, dx_, g.final_norm_weight, g.final_norm_bias, dfinal_, last, w.final_norm_weight, final_mean_,
           final_rstd_);
  for (int64_t i = config_.num_layers - 1; i >= 0; --i) {
    const TensorView x = i == 0 ? x0_ : layers_[i - 1].out;
    transformer_layer_bwd(layer_context(i), w.layers[i], g.layers[i], x, layers_[i], scratch_, dx_);
  }
  const TensorView demb = scratch_.dense;
  zero(demb);
  dropout_bwd(demb, dx_, emb_drop_mask_, dropout_ ? config_.hidden_dropout : 0.0f);
  embedding_bwd(g.word_embeddings, g.position_embeddings, demb.reshape({s_, b_, config_.hidden_size}), tokens_,
                TensorView());
  grad_scale_ = 0.0f;  // one backward per forward
}

}  // namespace mt
