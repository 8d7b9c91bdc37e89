// Causal self-attention with multi-head and grouped-query attention (GQA), and the rotary position
// embedding.  Layouts (b micro-batch, s sequence, n query heads, g query groups = key/value heads,
// d head dim; query head hq uses key/value head hq / (n/g)):
//   qkv  [s, b, g·(n/g + 2)·d]   Megatron's fused QKV rows: per group, n/g query heads, 1 key, 1 value
//   q    [b, n, s, d]   k, v [b, g, s, d]   (head-major so each head's rows are contiguous)
//   out  [s, b, n·d]    (head hq in columns hq·d .. hq·d + d − 1)
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/attention_args.h"  // AttentionOptions (scale, dropout and its rng indices, key_start), RopeForm
#include "tensor/tensor.h"

namespace mt {

// RoPE tables for positions 0..P−1: inv_freq[i] = base^(−2i/r) for i < cos.dim(1), angle =
// p·inv_freq[i]; cos[P, R], sin[P, R] (f32) with R = ceil(r/2) rotated pairs.  r is Megatron's
// rotary dim (RotaryEmbedding's dim: int(kv_channels·rotary_percent), or the head dim d at 1.0);
// rotary_dim = 0 means r = 2R.  Computed once at setup.
void rope_tables(const TensorView& cos, const TensorView& sin, double base, int64_t rotary_dim = 0);

// Splits the fused qkv into q, k, v; when cos/sin are not empty applies RoPE to q and k: the
// first 2R elements of each head row (R = cos.dim(1), 2R <= d) are rotated pairwise, pair c < R
// being elements (a, b) = (c, c + R) (RopeForm::rotate_half, Megatron's default _rotate_half) or
// (2c, 2c + 1) (RopeForm::interleaved, --rotary-interleaved):
//   x'[a] = x[a]·cs − x[b]·sn,  x'[b] = x[b]·cs + x[a]·sn,  cs, sn = cos/sin[p, c];
// elements 2R .. d − 1 are copied unrotated (--rotary-percent below 1).  The position p of
// token i of sequence j is positions[j, i] when `positions` (i32 [b, s], each in [0, P) for the
// tables' P rows; --reset-position-ids) is given, else the sequence index i.  Without tables
// `positions` and `form` are ignored (no rotation).  A position out of range throws mt::Error naming it.
void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions = TensorView(),
                        RopeForm form = RopeForm::rotate_half);
// Accumulates dqkv from dq, dk, dv (inverse rotation of the same pairs, by the same positions, when
// cos/sin are not empty; the unrotated elements are added as they are).
void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions = TensorView(),
                        RopeForm form = RopeForm::rotate_half);

// Memory-lean path (online softmax, FlashAttention-style): keeps no [s, s] tensor.
// out[s, b, n·d]; saves lse[b, n, s] (log-sum-exp of each scaled, masked score row).
void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options);
// Accumulates dq, dk, dv; recomputes probabilities (and dropout masks) from q, k, lse.
// workspace: f32 with at least attention_workspace_floats(...) elements.
void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace);

// Merges a partial result into an accumulated one, both of the same queries over disjoint keys
// (context parallelism's ring): lse[b, n, s] ← log(e^lse + e^lse_part) and out[s, b, n·d] ←
// out·e^(lse − lse') + out_part·e^(lse_part − lse'), row by row (backend/math's lse_merge). A row
// with lse −inf (no key seen yet) takes the other side as it is.
void attention_merge(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part);

// Materialising path (Megatron's unfused attention): saves probs[b, n, s, s] (after softmax, before
// dropout; masked entries 0) and, when dropout_p > 0, mask[b, n, s, s] (u8; empty otherwise).
void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options);
void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace);

// Decoding against a KV cache (inference; forward only). The cache of one layer holds, per
// sequence slot, the keys (values) of its positions: k_cache, v_cache f32 [slots, g, P, d]. The
// new tokens of a step (any number, from any slots) come as one batch of T rows, b = 1:
// slots, positions i32 [T] (each position < P, the row's place in its sequence).
//   kv_cache_write:  cache[slots[t], :, positions[t], :] = k (v) [1, g, T, d] of row t.
//   kv_cache_attention_fwd: out[T, n·d] = for row t and query head hq, softmax over keys
//   0..positions[t] of slot slots[t] (causal: a row sees its own position and the ones before,
//   written by this step or earlier ones), q [1, n, T, d] after RoPE; key/value head hq / (n/g).
// Rows of a slot must have been written at every position up to theirs.
void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions);
void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale);

// f32 elements of scratch that attention_bwd / attention_probs_bwd need for these shapes
// with up to `threads` OpenMP threads, on the backend of `device` (where the workspace will live:
// each backend lays out its own scratch).
size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads,
                                  Device device = Device::cpu);

}  // namespace mt
