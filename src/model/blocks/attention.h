// Owns the attention block (Megatron's SelfAttention with local attention):
//   out[Nl, h] = linear_proj(core_attention(rope(qk_norm(split(linear_qkv(inp[Nl, h]))))))
// qk_norm (--qk-layernorm) normalises each query and key head row; otherwise the identity.
// linear_qkv is column parallel (this rank's query groups), linear_proj row parallel; the
// residual dropout and add around it belong to the layer.
#pragma once

#include <array>

#include "backend/arena.h"
#include "model/blocks/norm_act.h"
#include "model/layer_context.h"

namespace mt {

// This tp rank's shards; biases empty without --add-bias-linear.
struct AttentionWeights {
  TensorView qkv_weight, qkv_bias;    // [(n + 2g)·d, h], [(n + 2g)·d]
  TensorView proj_weight, proj_bias;  // [h, n·d], [h]
  NormWeights q_norm, k_norm;         // [d] each, whole on every rank (--qk-layernorm)
  std::array<TensorView*, 8> all() {
    return {&qkv_weight, &qkv_bias, &proj_weight, &proj_bias, &q_norm.weight, &q_norm.bias, &k_norm.weight, &k_norm.bias};
  }
};

// Kept between forward and backward. q, k, v and context take the activation dtype (16-bit under
// --bf16/--fp16); lse, probabilities and masks stay f32/u8 as in Megatron.
struct AttentionSaved {
  TensorView q;           // [b, n, s, d]  after RoPE
  TensorView k, v;        // [b, g, s, d]  (k after RoPE)
  TensorView context;     // [N, n·d]  attention output, input of linear_proj
  TensorView lse;         // [b, n, s]     (flash attention)
  TensorView probs;       // [b, n, s, s]  (unfused attention)
  TensorView probs_mask;  // [b, n, s, s] u8 (unfused attention with dropout)
  // --qk-layernorm only: the norms' inputs (q and k as split, the activation dtype) and statistics.
  TensorView q_pre;       // [b, n, s, d]
  TensorView k_pre;       // [b, g, s, d]
  NormStats q_norm;       // [b·n·s]
  NormStats k_norm;       // [b·g·s]
};

// Transients shared by every layer's attention block (never saved).
struct AttentionScratch {
  TensorView qkv;         // [N, (n + 2g)·d]  forward: linear_qkv output; backward: dqkv
  // Backward only:
  TensorView dcontext;    // [N, n·d]
  TensorView dq, dk, dv;  // like q, k, v
  TensorView workspace;   // f32 for the attention backward (without context parallelism)
  TensorView dq_pre, dk_pre;  // like q, k: the gradients of the norms' inputs (--qk-layernorm)
  // Both directions, --context-parallel-size > 1 only: f32, cp_attention_scratch_floats of it.
  TensorView cp;
};

// `dtype`: the activation dtype of q, k, v and context.
AttentionSaved alloc_attention_saved(Arena& arena, const ModelConfig& c, LayerShape shape, DType dtype);
AttentionScratch alloc_attention_scratch_fwd(Arena& arena, const ModelConfig& c, LayerShape shape,
                                             WorkspaceTarget target);
void alloc_attention_scratch_bwd(Arena& arena, AttentionScratch& sc, const ModelConfig& c, LayerShape shape,
                                 WorkspaceTarget target);

// All tensors f32 (the caller stages 16-bit ones); every activation produced is rounded to
// ctx.act_dtype at once. inp: [Nl, h] (the input norm's output); out: [Nl, h] overwritten.
// With ctx.kv_cache active, the keys and values go to the cache and the queries attend over it.
// sp_gathered / sp_partial: [N, h] sequence-parallel buffers (empty otherwise).
void attention_block_fwd(const LayerContext& ctx, const AttentionWeights& w, const TensorView& inp,
                         const AttentionSaved& saved, const AttentionScratch& sc, const TensorView& sp_gathered,
                         const TensorView& sp_partial, const TensorView& out);
// din [Nl, h] overwritten with d(inp); weight gradients accumulate into g. dout [Nl, h].
void attention_block_bwd(const LayerContext& ctx, const AttentionWeights& w, const AttentionWeights& g,
                         const TensorView& inp, const AttentionSaved& saved, const AttentionScratch& sc,
                         const TensorView& sp_gathered, const TensorView& sp_partial, const TensorView& dout,
                         const TensorView& din);

}  // namespace mt
