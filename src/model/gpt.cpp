#include "model/gpt.h"

#include <omp.h>

#include "model/layers/norm_act.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear.h"

namespace mt {

GptModel::GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
                   int threads)
    : config_(config), s_(config.seq_length), b_(micro_batch), backend_(backend) {
  MT_CHECK(micro_batch > 0) << "--micro-batch-size must be positive, got " << micro_batch;
  if (threads <= 0) threads = omp_get_max_threads();
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
  token_weights_.resize(static_cast<size_t>(s_ * b_));
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
  final_out_ = act.alloc(DType::f32, {N, h});
  if (config_.normalization == Normalization::layernorm) final_mean_ = act.alloc(DType::f32, {N});
  final_rstd_ = act.alloc(DType::f32, {N});
  logits_ = act.alloc(DType::f32, {N, V});
  losses_ = act.alloc(DType::f32, {N});
  lse_ = act.alloc(DType::f32, {N});
  scratch_ = alloc_layer_scratch(ws, config_, shape, threads);
  dx_ = ws.alloc(DType::f32, {N, h});
  dlosses_ = ws.alloc(DType::f32, {N});
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
  ctx.layer_index = layer;
  return ctx;
}

double GptModel::forward(const TensorView& tokens, const TensorView& labels, const TensorView& loss_mask,
                         uint64_t dropout_round) {
  const char* op = "GptModel::forward";
  check_shape(tokens, {b_, s_}, op, "tokens");
  check_shape(labels, {b_, s_}, op, "labels");
  if (!loss_mask.empty()) check_shape(loss_mask, {b_, s_}, op, "loss_mask");
  MT_CHECK(tokens.device == Device::cpu && labels.device == Device::cpu) << op << ": inputs must be host tensors";
  round_ = dropout_round;
  const int64_t N = s_ * b_;

  // Inputs: tokens as given; labels and loss weights transposed to the [s, b] row order.
  backend_.copy_from_host(tokens_.data, tokens.data, tokens.bytes());
  std::vector<int32_t> labels_sb(static_cast<size_t>(N));
  double mask_sum = 0.0;
  for (int64_t j = 0; j < b_; ++j)
    for (int64_t i = 0; i < s_; ++i) {
      labels_sb[i * b_ + j] = labels.i32()[j * s_ + i];
      const float m = loss_mask.empty() ? 1.0f : loss_mask.f32()[j * s_ + i];
      token_weights_[i * b_ + j] = m;
      mask_sum += m;
    }
  MT_CHECK(mask_sum > 0) << op << ": the loss mask excludes every token of the micro-batch";
  for (float& w : token_weights_) w = static_cast<float>(w / mask_sum);
  backend_.copy_from_host(labels_.data, labels_sb.data(), labels_.bytes());

  const GptTensors w = params_->values();
  const TensorView emb = scratch_.dense;  // [N, h] transient
  embedding_fwd(emb.reshape({s_, b_, config_.hidden_size}), tokens_, TensorView(), w.word_embeddings,
                w.position_embeddings);
  dropout_fwd(x0_, emb_drop_mask_, emb, config_.hidden_dropout, dropout_stream(seed_, round_, -1, "embedding"), 0);
  TensorView x = x0_;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    transformer_layer_fwd(layer_context(i), w.layers[i], x, layers_[i], scratch_);
    x = layers_[i].out;
  }
  norm_fwd(config_, final_out_, final_mean_, final_rstd_, x, w.final_norm_weight, w.final_norm_bias);
  linear_fwd(logits_, final_out_, w.output_weight, TensorView());
  cross_entropy_fwd(losses_, lse_, logits_, labels_);

  std::vector<float> losses(static_cast<size_t>(N));
  backend_.copy_to_host(losses.data(), losses_.data, losses_.bytes());
  double loss = 0.0;
  for (int64_t n = 0; n < N; ++n) loss += static_cast<double>(token_weights_[n]) * losses[n];
  return loss;
}

void GptModel::backward(float loss_scale) {
  const int64_t N = s_ * b_;
  std::vector<float> dlosses(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) dlosses[n] = token_weights_[n] * loss_scale;
  backend_.copy_from_host(dlosses_.data, dlosses.data(), dlosses_.bytes());

  const GptTensors w = params_->values();
  const GptTensors g = params_->grads();
  const TensorView dlogits = logits_;  // in place: the logits are not needed any more
  cross_entropy_bwd(dlogits, dlosses_, logits_, lse_, labels_);
  const TensorView dfinal = scratch_.dnorm;
  zero(dfinal);
  linear_bwd(dfinal, g.output_weight, TensorView(), dlogits, final_out_, w.output_weight);
  zero(dx_);
  const TensorView last = config_.num_layers > 0 ? layers_.back().out : x0_;
  norm_bwd(config_, dx_, g.final_norm_weight, g.final_norm_bias, dfinal, last, w.final_norm_weight, final_mean_,
           final_rstd_);
  for (int64_t i = config_.num_layers - 1; i >= 0; --i) {
    const TensorView x = i == 0 ? x0_ : layers_[i - 1].out;
    transformer_layer_bwd(layer_context(i), w.layers[i], g.layers[i], x, layers_[i], scratch_, dx_);
  }
  const TensorView demb = scratch_.dense;
  zero(demb);
  dropout_bwd(demb, dx_, emb_drop_mask_, config_.hidden_dropout);
  embedding_bwd(g.word_embeddings, g.position_embeddings, demb.reshape({s_, b_, config_.hidden_size}), tokens_,
                TensorView());
}

}  // namespace mt
