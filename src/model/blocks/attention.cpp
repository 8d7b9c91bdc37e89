#include "model/blocks/attention.h"

#include <cmath>

#include "backend/backend.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "parallel/layers.h"

namespace mt {

namespace {

// The saved probability mask exists only when attention dropout is on (and this pass uses it).
TensorView probs_mask(const AttentionSaved& saved, const AttentionOptions& o) {
  return o.dropout_p > 0.0f ? saved.probs_mask : TensorView();
}

AttentionOptions attention_options(const LayerContext& ctx) {
  AttentionOptions o;
  o.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ctx.config->kv_channels)));
  o.dropout_p = ctx.dropout ? ctx.config->attention_dropout : 0.0f;
  o.rng = dropout_stream(ctx.seed, ctx.layer_index, "attention");
  o.first_sample = ctx.first_sample;
  o.head_offset = ctx.tp.rank() * ctx.config->num_attention_heads;
  o.total_heads = ctx.total_heads;
  o.key_start = ctx.key_start;
  return o;
}

// [rows, features] viewed as [s, b, features], the layout the attention ops take.
TensorView sbh(const LayerContext& ctx, const TensorView& t) { return t.reshape({ctx.shape.s, ctx.shape.b, t.dim(1)}); }

}  // namespace

AttentionSaved alloc_attention_saved(Arena& a, const ModelConfig& c, LayerShape shape, DType dtype) {
  const int64_t s = shape.s, b = shape.b, N = shape.rows();
  const int64_t n = c.num_attention_heads, g = c.num_query_groups, d = c.kv_channels;
  AttentionSaved saved;
  saved.q = a.alloc(dtype, {b, n, s, d});
  saved.k = a.alloc(dtype, {b, g, s, d});
  saved.v = a.alloc(dtype, {b, g, s, d});
  saved.context = a.alloc(dtype, {N, n * d});
  if (c.attention_impl == AttentionImpl::flash) {
    saved.lse = a.alloc(DType::f32, {b, n, s});
  } else {
    saved.probs = a.alloc(DType::f32, {b, n, s, s});
    if (c.attention_dropout > 0) saved.probs_mask = a.alloc(DType::u8, {b, n, s, s});
  }
  return saved;
}

AttentionScratch alloc_attention_scratch_fwd(Arena& a, const ModelConfig& c, LayerShape shape) {
  AttentionScratch sc;
  sc.qkv = a.alloc(DType::f32, {shape.rows(), c.qkv_size()});
  return sc;
}

void alloc_attention_scratch_bwd(Arena& a, AttentionScratch& sc, const ModelConfig& c, LayerShape shape,
                                 WorkspaceTarget target) {
  const int64_t s = shape.s, b = shape.b, N = shape.rows();
  const int64_t n = c.num_attention_heads, g = c.num_query_groups, d = c.kv_channels;
  sc.dcontext = a.alloc(DType::f32, {N, n * d});
  sc.dq = a.alloc(DType::f32, {b, n, s, d});
  sc.dk = a.alloc(DType::f32, {b, g, s, d});
  sc.dv = a.alloc(DType::f32, {b, g, s, d});
  sc.workspace = a.alloc(DType::f32, {static_cast<int64_t>(attention_workspace_floats(b, n, s, d, target.threads, target.device))});
}

void attention_block_fwd(const LayerContext& ctx, const AttentionWeights& w, const TensorView& inp,
                         const AttentionSaved& saved, const AttentionScratch& sc, const TensorView& sp_gathered,
                         const TensorView& sp_partial, const TensorView& out) {
  const ModelConfig& c = *ctx.config;
  column_parallel_linear_fwd(ctx.tp, sc.qkv, inp, w.qkv_weight, w.qkv_bias, sp_gathered);
  ctx.round(sc.qkv);
  qkv_split_rope_fwd(saved.q, saved.k, saved.v, sbh(ctx, sc.qkv), ctx.rope_cos, ctx.rope_sin, ctx.positions,
                     c.rope_form());
  ctx.round(saved.q);
  ctx.round(saved.k);
  const AttentionOptions options = attention_options(ctx);
  if (ctx.kv_cache.active()) {
    MT_CHECK(!ctx.dropout && ctx.key_start.empty()) << "attention against a KV cache is inference: no dropout, no documents";
    const KvCacheStep& kv = ctx.kv_cache;
    kv_cache_write(kv.k, kv.v, saved.k, saved.v, kv.slots, kv.positions);
    kv_cache_attention_fwd(saved.context, saved.q, kv.k, kv.v, kv.slots, kv.positions, options.scale);
  } else if (c.attention_impl == AttentionImpl::flash) {
    attention_fwd(sbh(ctx, saved.context), saved.lse, saved.q, saved.k, saved.v, options);
  } else {
    attention_probs_fwd(sbh(ctx, saved.context), saved.probs, probs_mask(saved, options), saved.q, saved.k, saved.v,
                        options);
  }
  ctx.round(saved.context);
  row_parallel_linear_fwd(ctx.tp, out, saved.context, w.proj_weight, w.proj_bias, sp_partial);
  ctx.round(out);
}

void attention_block_bwd(const LayerContext& ctx, const AttentionWeights& w, const AttentionWeights& g,
                         const TensorView& inp, const AttentionSaved& saved, const AttentionScratch& sc,
                         const TensorView& sp_gathered, const TensorView& sp_partial, const TensorView& dout,
                         const TensorView& din) {
  const ModelConfig& c = *ctx.config;
  row_parallel_linear_bwd(ctx.tp, sc.dcontext, g.proj_weight, g.proj_bias, dout, saved.context, w.proj_weight,
                          sp_gathered);
  ctx.round(sc.dcontext);
  zero(sc.dq);
  zero(sc.dk);
  zero(sc.dv);
  const AttentionOptions options = attention_options(ctx);
  if (c.attention_impl == AttentionImpl::flash)
    attention_bwd(sc.dq, sc.dk, sc.dv, sbh(ctx, sc.dcontext), sbh(ctx, saved.context), saved.lse, saved.q, saved.k,
                  saved.v, options, sc.workspace);
  else
    attention_probs_bwd(sc.dq, sc.dk, sc.dv, sbh(ctx, sc.dcontext), saved.probs, probs_mask(saved, options), saved.q,
                        saved.k, saved.v, options, sc.workspace);
  zero(sc.qkv);
  qkv_split_rope_bwd(sbh(ctx, sc.qkv), sc.dq, sc.dk, sc.dv, ctx.rope_cos, ctx.rope_sin, ctx.positions,
                     c.rope_form());
  ctx.round(sc.qkv);
  column_parallel_linear_bwd(ctx.tp, din, g.qkv_weight, g.qkv_bias, sc.qkv, inp, w.qkv_weight, sp_gathered,
                             sp_partial);
  ctx.round(din);
}

}  // namespace mt
