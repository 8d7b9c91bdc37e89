#include "model/blocks/attention.h"

#include <cmath>

#include "backend/backend.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "parallel/context_parallel.h"
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

// --qk-layernorm normalises the query and key heads between the split and RoPE. Rather than a
// kernel of its own, the fused qkv is split without rotation, the heads normalised, and the
// result fused back into qkv, which the usual split then rotates: two more elementwise passes over
// qkv, and every backend already has the ops. saved.q and saved.k hold the normalised heads until
// that split overwrites them.
void qk_norm_fwd(const LayerContext& ctx, const AttentionWeights& w, const AttentionSaved& saved,
                 const AttentionScratch& sc) {
  const ModelConfig& c = *ctx.config;
  const TensorView qkv = sbh(ctx, sc.qkv);
  qkv_split_rope_fwd(saved.q_pre, saved.k_pre, saved.v, qkv, TensorView(), TensorView());
  norm_fwd(c, saved.q, saved.q_norm, saved.q_pre, w.q_norm);
  norm_fwd(c, saved.k, saved.k_norm, saved.k_pre, w.k_norm);
  ctx.round(saved.q);
  ctx.round(saved.k);
  zero(sc.qkv);
  qkv_split_rope_bwd(qkv, saved.q, saved.k, saved.v, TensorView(), TensorView());
}

// The backward of qk_norm_fwd: sc.qkv holds the gradient of the fused normalised heads on entry and
// of the fused qkv on exit; sc.dq, dk, dv are overwritten.
void qk_norm_bwd(const LayerContext& ctx, const AttentionWeights& w, const AttentionWeights& g,
                 const AttentionSaved& saved, const AttentionScratch& sc) {
  const ModelConfig& c = *ctx.config;
  const TensorView qkv = sbh(ctx, sc.qkv);
  qkv_split_rope_fwd(sc.dq, sc.dk, sc.dv, qkv, TensorView(), TensorView());
  zero(sc.dq_pre);
  zero(sc.dk_pre);
  norm_bwd(c, sc.dq_pre, g.q_norm, sc.dq, saved.q_pre, w.q_norm, saved.q_norm);
  norm_bwd(c, sc.dk_pre, g.k_norm, sc.dk, saved.k_pre, w.k_norm, saved.k_norm);
  ctx.round(sc.dq_pre);
  ctx.round(sc.dk_pre);
  zero(sc.qkv);
  qkv_split_rope_bwd(qkv, sc.dq_pre, sc.dk_pre, sc.dv, TensorView(), TensorView());
}

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
  if (c.qk_layernorm) {
    saved.q_pre = a.alloc(dtype, {b, n, s, d});
    saved.k_pre = a.alloc(dtype, {b, g, s, d});
    saved.q_norm = alloc_norm_stats(a, c, b * n * s);
    saved.k_norm = alloc_norm_stats(a, c, b * g * s);
  }
  return saved;
}

AttentionScratch alloc_attention_scratch_fwd(Arena& a, const ModelConfig& c, LayerShape shape, WorkspaceTarget target) {
  AttentionScratch sc;
  sc.qkv = a.alloc(DType::f32, {shape.rows(), c.qkv_size()});
  const size_t cp_floats =
      cp_attention_scratch_floats(c.cp_comm_type, static_cast<int>(c.context_parallel_size), shape.b,
                                  c.num_attention_heads, c.num_query_groups, shape.s, c.kv_channels, target.threads,
                                  target.device);
  if (cp_floats > 0) sc.cp = a.alloc(DType::f32, {static_cast<int64_t>(cp_floats)});
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
  if (c.context_parallel_size == 1)  // context parallelism's attention has its workspace in sc.cp
    sc.workspace =
        a.alloc(DType::f32, {static_cast<int64_t>(attention_workspace_floats(b, n, s, d, target.threads, target.device))});
  if (c.qk_layernorm) {
    sc.dq_pre = a.alloc(DType::f32, {b, n, s, d});
    sc.dk_pre = a.alloc(DType::f32, {b, g, s, d});
  }
}

void attention_block_fwd(const LayerContext& ctx, const AttentionWeights& w, const TensorView& inp,
                         const AttentionSaved& saved, const AttentionScratch& sc, const TensorView& sp_gathered,
                         const TensorView& sp_partial, const TensorView& out) {
  const ModelConfig& c = *ctx.config;
  column_parallel_linear_fwd(ctx.tp, sc.qkv, inp, w.qkv_weight, w.qkv_bias, sp_gathered);
  ctx.round(sc.qkv);
  if (c.qk_layernorm) qk_norm_fwd(ctx, w, saved, sc);
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
  } else if (ctx.cp.active()) {
    cp_attention_fwd(ctx.cp, sbh(ctx, saved.context), saved.lse, saved.q, saved.k, saved.v, options, sc.cp);
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
  if (ctx.cp.active())
    cp_attention_bwd(ctx.cp, sc.dq, sc.dk, sc.dv, sbh(ctx, sc.dcontext), sbh(ctx, saved.context), saved.lse, saved.q,
                     saved.k, saved.v, options, sc.cp);
  else if (c.attention_impl == AttentionImpl::flash)
    attention_bwd(sc.dq, sc.dk, sc.dv, sbh(ctx, sc.dcontext), sbh(ctx, saved.context), saved.lse, saved.q, saved.k,
                  saved.v, options, sc.workspace);
  else
    attention_probs_bwd(sc.dq, sc.dk, sc.dv, sbh(ctx, sc.dcontext), saved.probs, probs_mask(saved, options), saved.q,
                        saved.k, saved.v, options, sc.workspace);
  zero(sc.qkv);
  qkv_split_rope_bwd(sbh(ctx, sc.qkv), sc.dq, sc.dk, sc.dv, ctx.rope_cos, ctx.rope_sin, ctx.positions,
                     c.rope_form());
  ctx.round(sc.qkv);
  if (c.qk_layernorm) qk_norm_bwd(ctx, w, g, saved, sc);
  column_parallel_linear_bwd(ctx.tp, din, g.qkv_weight, g.qkv_bias, sc.qkv, inp, w.qkv_weight, sp_gathered,
                             sp_partial);
  ctx.round(din);
}

}  // namespace mt
