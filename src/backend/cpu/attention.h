// CPU kernels for ops/attention.h (shapes already validated by the op): QKV split + RoPE, the
// online-softmax (lean) attention and the materialising (probs) attention, forward and backward.
// Details the op contract leaves open: RoPE tables are computed in double and rounded once; the
// probs path's u8 mask is 0 above the diagonal and before key_start (those entries draw no random
// number); the lean path skips key tiles lying wholly before the key_start of every query of its
// query tile; calls below about 2^20 multiply-adds run single-threaded; the backward is
// deterministic for a given thread count (the GQA split below changes only the summation order of
// dk/dv).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/attention_args.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void rope_tables(const TensorView& cos, const TensorView& sin, double base, int64_t rotary_dim);
void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form);
void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form);

void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options);
void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace);
void attention_merge(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part);
void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options);
void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace);

// Workspace layout of either backward: `threads` per-thread slots of scratch tiles, then (only when
// threads > b, i.e. when GQA/MQA may leave threads idle) per-query-head dk/dv partials [2, b, n, s, d].
// A workspace sized for fewer threads than OpenMP offers makes the backward use fewer threads.
size_t attention_workspace_floats_per_thread(int64_t b, int64_t n, int64_t s, int64_t d);
size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads);

}  // namespace mt::cpu

namespace mt::cpu {

// Decoding against a KV cache (ops/attention.h's kv_cache_write and kv_cache_attention_fwd).
void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions);
void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale);

}  // namespace mt::cpu
