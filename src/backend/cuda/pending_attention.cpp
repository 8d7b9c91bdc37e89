// Placeholders for the attention ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void rope_tables(const TensorView& cos, const TensorView& sin, double base) {
  MT_FAIL() << "rope_tables: no CUDA kernel yet (issue 25); run with --device cpu";
}

void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions) {
  MT_FAIL() << "qkv_split_rope_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions) {
  MT_FAIL() << "qkv_split_rope_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options) {
  MT_FAIL() << "attention_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  MT_FAIL() << "attention_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options) {
  MT_FAIL() << "attention_probs_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  MT_FAIL() << "attention_probs_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads) {
  MT_FAIL() << "attention_workspace_floats: no CUDA kernel yet (issue 25); run with --device cpu";
}

void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions) {
  MT_FAIL() << "kv_cache_write: no CUDA kernel yet (issue 25); run with --device cpu";
}

void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale) {
  MT_FAIL() << "kv_cache_attention_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
