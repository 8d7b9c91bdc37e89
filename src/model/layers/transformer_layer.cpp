#include "model/layers/transformer_layer.h"

#include <cmath>
#include <string>

#include "model/layers/norm_act.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "parallel/layers.h"

namespace mt {

namespace {
bool layernorm(const ModelConfig& c) { return c.normalization == Normalization::layernorm; }

float hidden_dropout(const LayerContext& ctx) { return ctx.dropout ? ctx.config->hidden_dropout : 0.0f; }

// The saved probability mask exists only when attention dropout is on (and this pass uses it).
TensorView probs_mask(const LayerActivations& act, const AttentionOptions& o) {
  return o.dropout_p > 0.0f ? act.probs_mask : TensorView();
}

AttentionOptions attention_options(const LayerContext& ctx) {
  AttentionOptions o;
  o.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ctx.config->kv_channels)));
  o.dropout_p = ctx.dropout ? ctx.config->attention_dropout : 0.0f;
  o.rng = dropout_stream(ctx.seed, ctx.dropout_round, ctx.layer_index, "attention");
  o.head_offset = ctx.tp.rank() * ctx.config->num_attention_heads;
  o.total_heads = ctx.total_heads;
  o.key_start = ctx.key_start;
  return o;
}

// Philox index of this rank's first residual-stream element (its rows under sequence parallelism).
uint64_t residual_offset(const LayerContext& ctx) {
  return static_cast<uint64_t>(ctx.tp.first_row(ctx.shape.rows()) * ctx.config->hidden_size);
}
}  // namespace

RngStream dropout_stream(uint64_t seed, uint64_t round, int64_t layer, const char* site) {
  // Mix (site, layer, round) into one 64-bit stream id; splitmix-style so nearby rounds differ widely.
  uint64_t z = stream_id(std::string(site) + "." + std::to_string(layer)) + round * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return RngStream{seed, z ^ (z >> 31)};
}

LayerActivations alloc_layer_activations(Arena& a, const ModelConfig& c, LayerShape shape, DType dtype,
                                         bool with_output) {
  const int64_t s = shape.s, b = shape.b, N = shape.rows(), Nl = shape.local_rows(), h = c.hidden_size;
  const int64_t n = c.num_attention_heads, g = c.num_query_groups, d = c.kv_channels;
  LayerActivations act;
  if (layernorm(c)) act.norm1_mean = a.alloc(DType::f32, {Nl});
  act.norm1_rstd = a.alloc(DType::f32, {Nl});
  act.q = a.alloc(dtype, {b, n, s, d});
  act.k = a.alloc(dtype, {b, g, s, d});
  act.v = a.alloc(dtype, {b, g, s, d});
  act.context = a.alloc(dtype, {N, n * d});
  if (c.attention_impl == AttentionImpl::flash) {
    act.lse = a.alloc(DType::f32, {b, n, s});
  } else {
    act.probs = a.alloc(DType::f32, {b, n, s, s});
    if (c.attention_dropout > 0) act.probs_mask = a.alloc(DType::u8, {b, n, s, s});
  }
  act.attn_drop_mask = a.alloc(DType::u8, {Nl, h});
  act.residual1 = a.alloc(dtype, {Nl, h});
  if (layernorm(c)) act.norm2_mean = a.alloc(DType::f32, {Nl});
  act.norm2_rstd = a.alloc(DType::f32, {Nl});
  if (!c.recompute_mlp) act.fc1_out = a.alloc(dtype, {N, c.fc1_size()});
  act.mlp_drop_mask = a.alloc(DType::u8, {Nl, h});
  if (with_output) act.out = a.alloc(dtype, {Nl, h});
  return act;
}

LayerScratch alloc_layer_scratch(Arena& a, const ModelConfig& c, LayerShape shape, int threads) {
  const int64_t s = shape.s, b = shape.b, N = shape.rows(), Nl = shape.local_rows(), h = c.hidden_size;
  const int64_t n = c.num_attention_heads, g = c.num_query_groups, d = c.kv_channels;
  LayerScratch sc;
  sc.norm1_out = a.alloc(DType::f32, {Nl, h});
  sc.norm2_out = a.alloc(DType::f32, {Nl, h});
  sc.act_out = a.alloc(DType::f32, {N, c.ffn_hidden_size});
  if (c.recompute_mlp) sc.fc1_out = a.alloc(DType::f32, {N, c.fc1_size()});
  sc.qkv = a.alloc(DType::f32, {N, c.qkv_size()});
  sc.dense = a.alloc(DType::f32, {Nl, h});
  sc.dnorm = a.alloc(DType::f32, {Nl, h});
  sc.dcontext = a.alloc(DType::f32, {N, n * d});
  sc.dq = a.alloc(DType::f32, {b, n, s, d});
  sc.dk = a.alloc(DType::f32, {b, g, s, d});
  sc.dv = a.alloc(DType::f32, {b, g, s, d});
  sc.dfc1 = a.alloc(DType::f32, {N, c.fc1_size()});
  sc.dact = a.alloc(DType::f32, {N, c.ffn_hidden_size});
  sc.attention = a.alloc(DType::f32, {static_cast<int64_t>(attention_workspace_floats(b, n, s, d, threads))});
  return sc;
}

void transformer_layer_fwd(const LayerContext& ctx, const LayerTensors& w, const TensorView& x,
                           LayerActivations& act, const LayerScratch& sc, bool with_output) {
  const ModelConfig& c = *ctx.config;
  auto round = [&](const TensorView& t) { round_to_dtype(t, ctx.act_dtype); };
  // Attention block.
  norm_fwd(c, sc.norm1_out, act.norm1_mean, act.norm1_rstd, x, w.input_norm_weight, w.input_norm_bias);
  round(sc.norm1_out);
  column_parallel_linear_fwd(ctx.tp, sc.qkv, sc.norm1_out, w.qkv_weight, w.qkv_bias, sc.sp_gathered);
  round(sc.qkv);
  qkv_split_rope_fwd(act.q, act.k, act.v, sc.qkv.reshape({ctx.shape.s, ctx.shape.b, c.qkv_size()}), ctx.rope_cos,
                     ctx.rope_sin, ctx.positions);
  round(act.q);
  round(act.k);
  const AttentionOptions options = attention_options(ctx);
  const TensorView context_sbh = act.context.reshape({ctx.shape.s, ctx.shape.b, c.attention_size()});
  if (c.attention_impl == AttentionImpl::flash)
    attention_fwd(context_sbh, act.lse, act.q, act.k, act.v, options);
  else
    attention_probs_fwd(context_sbh, act.probs, probs_mask(act, options), act.q, act.k, act.v, options);
  round(act.context);
  row_parallel_linear_fwd(ctx.tp, sc.dense, act.context, w.proj_weight, w.proj_bias, sc.sp_partial);
  round(sc.dense);
  dropout_add_fwd(act.residual1, act.attn_drop_mask, sc.dense, x, hidden_dropout(ctx),
                  dropout_stream(ctx.seed, ctx.dropout_round, ctx.layer_index, "attention_output"),
                  residual_offset(ctx));
  round(act.residual1);
  // MLP block.
  norm_fwd(c, sc.norm2_out, act.norm2_mean, act.norm2_rstd, act.residual1, w.mlp_norm_weight, w.mlp_norm_bias);
  round(sc.norm2_out);
  const TensorView fc1_out = c.recompute_mlp ? sc.fc1_out : act.fc1_out;
  column_parallel_linear_fwd(ctx.tp, fc1_out, sc.norm2_out, w.fc1_weight, w.fc1_bias, sc.sp_gathered);
  round(fc1_out);
  const RngStream mlp_dropout = dropout_stream(ctx.seed, ctx.dropout_round, ctx.layer_index, "mlp_output");
  if (!with_output) return dropout_mask(act.mlp_drop_mask, hidden_dropout(ctx), mlp_dropout, residual_offset(ctx));
  mlp_activation_fwd(c, sc.act_out, fc1_out);
  round(sc.act_out);
  row_parallel_linear_fwd(ctx.tp, sc.dense, sc.act_out, w.fc2_weight, w.fc2_bias, sc.sp_partial);
  round(sc.dense);
  dropout_add_fwd(act.out, act.mlp_drop_mask, sc.dense, act.residual1, hidden_dropout(ctx), mlp_dropout,
                  residual_offset(ctx));
  round(act.out);
}

void transformer_layer_bwd(const LayerContext& ctx, const LayerTensors& w, const LayerTensors& g,
                           const TensorView& x, const LayerActivations& act, const LayerScratch& sc,
                           const TensorView& dx) {
  const ModelConfig& c = *ctx.config;
  // Activation gradients are 16-bit tensors in Megatron too (that is where fp16 overflows), so
  // each is rounded as it is produced; weight gradients accumulate in f32.
  auto round = [&](const TensorView& t) { round_to_dtype(t, ctx.act_dtype); };
  // Remake the outputs the forward did not keep (the norms recompute their own statistics, the
  // same values as saved).
  norm_fwd(c, sc.norm1_out, act.norm1_mean, act.norm1_rstd, x, w.input_norm_weight, w.input_norm_bias);
  round(sc.norm1_out);
  norm_fwd(c, sc.norm2_out, act.norm2_mean, act.norm2_rstd, act.residual1, w.mlp_norm_weight, w.mlp_norm_bias);
  round(sc.norm2_out);
  const TensorView fc1_out = c.recompute_mlp ? sc.fc1_out : act.fc1_out;
  if (c.recompute_mlp) {
    column_parallel_linear_fwd(ctx.tp, fc1_out, sc.norm2_out, w.fc1_weight, w.fc1_bias, sc.sp_gathered);
    round(fc1_out);
  }
  mlp_activation_fwd(c, sc.act_out, fc1_out);
  round(sc.act_out);
  // MLP block. dx holds d(out); the residual passes it to d(residual1) unchanged, and the norm
  // backward below adds the branch's contribution into the same buffer.
  zero(sc.dense);
  dropout_bwd(sc.dense, dx, act.mlp_drop_mask, hidden_dropout(ctx));
  round(sc.dense);
  row_parallel_linear_bwd(ctx.tp, sc.dact, g.fc2_weight, g.fc2_bias, sc.dense, sc.act_out, w.fc2_weight,
                          sc.sp_gathered);
  round(sc.dact);
  zero(sc.dfc1);
  mlp_activation_bwd(c, sc.dfc1, sc.dact, fc1_out);
  round(sc.dfc1);
  column_parallel_linear_bwd(ctx.tp, sc.dnorm, g.fc1_weight, g.fc1_bias, sc.dfc1, sc.norm2_out, w.fc1_weight,
                             sc.sp_gathered, sc.sp_partial);
  round(sc.dnorm);
  norm_bwd(c, dx, g.mlp_norm_weight, g.mlp_norm_bias, sc.dnorm, act.residual1, w.mlp_norm_weight, act.norm2_mean,
           act.norm2_rstd);
  round(dx);
  // Attention block; dx now holds d(residual1).
  zero(sc.dense);
  dropout_bwd(sc.dense, dx, act.attn_drop_mask, hidden_dropout(ctx));
  round(sc.dense);
  row_parallel_linear_bwd(ctx.tp, sc.dcontext, g.proj_weight, g.proj_bias, sc.dense, act.context, w.proj_weight,
                          sc.sp_gathered);
  round(sc.dcontext);
  zero(sc.dq);
  zero(sc.dk);
  zero(sc.dv);
  const AttentionOptions options = attention_options(ctx);
  const TensorView dcontext_sbh = sc.dcontext.reshape({ctx.shape.s, ctx.shape.b, c.attention_size()});
  if (c.attention_impl == AttentionImpl::flash) {
    const TensorView context_sbh = act.context.reshape({ctx.shape.s, ctx.shape.b, c.attention_size()});
    attention_bwd(sc.dq, sc.dk, sc.dv, dcontext_sbh, context_sbh, act.lse, act.q, act.k, act.v, options,
                  sc.attention);
  } else {
    attention_probs_bwd(sc.dq, sc.dk, sc.dv, dcontext_sbh, act.probs, probs_mask(act, options), act.q, act.k,
                        act.v, options, sc.attention);
  }
  zero(sc.qkv);
  qkv_split_rope_bwd(sc.qkv.reshape({ctx.shape.s, ctx.shape.b, c.qkv_size()}), sc.dq, sc.dk, sc.dv, ctx.rope_cos,
                     ctx.rope_sin, ctx.positions);
  round(sc.qkv);
  column_parallel_linear_bwd(ctx.tp, sc.dnorm, g.qkv_weight, g.qkv_bias, sc.qkv, sc.norm1_out, w.qkv_weight,
                             sc.sp_gathered, sc.sp_partial);
  round(sc.dnorm);
  norm_bwd(c, dx, g.input_norm_weight, g.input_norm_bias, sc.dnorm, x, w.input_norm_weight, act.norm1_mean,
           act.norm1_rstd);
  round(dx);
}

}  // namespace mt
