// CUDA entry points of ops/attention.h: views to pointers, the checks of index tensors' values
// (positions, key_start) that the CPU kernels make on the host, then the kernels of attention.cu.
#include "backend/cuda/kernels/attention.h"

#include <cstdint>
#include <vector>

#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"
#include "base/philox.h"

namespace mt::cuda {

namespace {

k::AttentionShape shape_of(const TensorView& q, const TensorView& k) {
  return {q.dim(0), q.dim(1), k.dim(1), q.dim(2), q.dim(3)};
}

// The values of a small i32 device tensor, for range checks that must throw before any kernel
// reads them (one synchronising copy; a device-side check with a deferred error is the fast path).
std::vector<int32_t> host_i32(const TensorView& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) {
    MT_CUDA_CHECK(cudaMemcpyAsync(out.data(), t.data, t.bytes(), cudaMemcpyDeviceToHost, stream()));
    MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  return out;
}

// positions [b, s] each within the RoPE tables' rows (the CPU's message); nullptr when unused.
const int32_t* rope_positions(const TensorView& positions, const TensorView& cos, int64_t s, const char* op) {
  if (positions.empty() || cos.empty()) return nullptr;
  const std::vector<int32_t> pos = host_i32(positions);
  const int64_t limit = cos.dim(0);
  for (size_t e = 0; e < pos.size(); ++e)
    MT_CHECK(pos[e] >= 0 && pos[e] < limit)
        << op << ": positions[" << e / s << ", " << e % s << "] = " << pos[e] << " is out of range [0, " << limit
        << ") of the RoPE tables (--max-position-embeddings)";
  return positions.i32();
}

k::RopeArgs rope_args(const TensorView& cos, const TensorView& sin, const int32_t* positions, RopeForm form) {
  if (cos.empty()) return {nullptr, nullptr, nullptr, 0, false};
  return {cos.f32(), sin.f32(), positions, cos.dim(1), form == RopeForm::interleaved};
}

k::AttentionDropout dropout_of(const AttentionOptions& o, int64_t n) {
  k::AttentionDropout d{};
  d.on = o.dropout_p > 0.0f;
  d.seed = o.rng.seed;
  d.stream = o.rng.stream;
  d.threshold = dropout_threshold(o.dropout_p);
  d.inv_keep = 1.0f / (1.0f - o.dropout_p);
  d.total_heads = o.total_heads ? o.total_heads : n;
  // The sample offset folds into the head offset, as on the CPU.
  d.head_offset = static_cast<int64_t>(o.first_sample) * d.total_heads + o.head_offset;
  return d;
}

// key_start [b, s] with each value in [0, i] (the CPU's message); nullptr for plain causal.
const int32_t* key_starts(const AttentionOptions& o, int64_t s, const char* op) {
  if (o.key_start.empty()) return nullptr;
  const std::vector<int32_t> ks = host_i32(o.key_start);
  for (size_t e = 0; e < ks.size(); ++e) {
    const int64_t i = static_cast<int64_t>(e) % s;
    MT_CHECK(ks[e] >= 0 && ks[e] <= i) << op << ": key_start[" << static_cast<int64_t>(e) / s << ", " << i
                                       << "] = " << ks[e] << " must lie in [0, " << i
                                       << "] (a token's document starts at or before it)";
  }
  return o.key_start.i32();
}

// The CUDA kernels take queries and keys at positions 0 .. s − 1 only (no context parallelism yet).
void check_unshifted(const TensorView& q, const TensorView& k, const AttentionOptions& o, const char* op) {
  const int64_t s = q.dim(2);
  MT_CHECK(k.dim(2) == s && o.q_rows.identity(s) && o.k_rows.identity(s) && (o.seq_length == 0 || o.seq_length == s))
      << op << ": context parallelism's attention (queries or keys away from positions 0 .. s − 1) runs on CPU only "
      << "so far; use --context-parallel-size 1 on CUDA";
}

void check_head_dim(int64_t d, const char* op) {
  MT_CHECK(d <= k::kAttentionMaxHeadDim) << op << ": head dim " << d << " is above the CUDA kernels' "
                                         << k::kAttentionMaxHeadDim << " (their shared-memory tiles)";
}

}  // namespace

void rope_tables(const TensorView& cos, const TensorView& sin, double base, int64_t rotary_dim) {
  k::rope_tables(cos.f32(), sin.f32(), cos.dim(0), cos.dim(1), rotary_dim, base, stream());
  check_launch("rope_tables");
}

void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form) {
  const k::AttentionShape sh = shape_of(q, k);
  const k::RopeArgs rope = rope_args(cos, sin, rope_positions(positions, cos, sh.s, "qkv_split_rope_fwd"), form);
  k::qkv_split_rope_fwd(q.f32(), k.f32(), v.f32(), qkv.f32(), rope, sh, stream());
  check_launch("qkv_split_rope_fwd");
}

void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form) {
  const k::AttentionShape sh = shape_of(dq, dk);
  const k::RopeArgs rope = rope_args(cos, sin, rope_positions(positions, cos, sh.s, "qkv_split_rope_bwd"), form);
  k::qkv_split_rope_bwd(dqkv.f32(), dq.f32(), dk.f32(), dv.f32(), rope, sh, stream());
  check_launch("qkv_split_rope_bwd");
}

void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options) {
  const char* op = "attention_fwd";
  if (q.numel() == 0) return;  // an empty grid is no launch
  const k::AttentionShape sh = shape_of(q, k);
  check_head_dim(sh.d, op);
  check_unshifted(q, k, options, op);
  const int32_t* ks = key_starts(options, sh.s, op);
  k::attention_fwd(out.f32(), lse.f32(), q.f32(), k.f32(), v.f32(), ks, options.scale, dropout_of(options, sh.n), sh,
                   stream());
  check_launch(op);
}

void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  const char* op = "attention_bwd";
  if (q.numel() == 0) return;  // an empty grid is no launch
  const k::AttentionShape sh = shape_of(q, k);
  check_head_dim(sh.d, op);
  check_unshifted(q, k, options, op);
  const int32_t* ks = key_starts(options, sh.s, op);
  k::attention_bwd(dq.f32(), dk.f32(), dv.f32(), dout.f32(), out.f32(), lse.f32(), q.f32(), k.f32(), v.f32(), ks,
                   options.scale, dropout_of(options, sh.n), sh, workspace.f32(), stream());
  check_launch(op);
}

void attention_merge(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) {
  if (lse.numel() == 0) return;
  const k::AttentionShape sh{lse.dim(0), lse.dim(1), lse.dim(1), lse.dim(2), out.dim(2) / lse.dim(1)};
  k::attention_merge(out.f32(), lse.f32(), out_part.f32(), lse_part.f32(), sh, stream());
  check_launch("attention_merge");
}

void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options) {
  const char* op = "attention_probs_fwd";
  if (q.numel() == 0) return;  // an empty grid is no launch
  const k::AttentionShape sh = shape_of(q, k);
  check_head_dim(sh.d, op);
  const int32_t* ks = key_starts(options, sh.s, op);
  const k::AttentionDropout drop = dropout_of(options, sh.n);
  k::attention_probs_fwd(out.f32(), probs.f32(), drop.on ? mask.u8() : nullptr, q.f32(), k.f32(), v.f32(), ks,
                         options.scale, drop, sh, stream());
  check_launch(op);
}

void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  const char* op = "attention_probs_bwd";
  if (q.numel() == 0) return;  // an empty grid is no launch
  const k::AttentionShape sh = shape_of(q, k);
  check_head_dim(sh.d, op);
  const int32_t* ks = key_starts(options, sh.s, op);
  const k::AttentionDropout drop = dropout_of(options, sh.n);
  k::attention_probs_bwd(dq.f32(), dk.f32(), dv.f32(), dout.f32(), probs.f32(), drop.on ? mask.u8() : nullptr,
                         q.f32(), k.f32(), v.f32(), ks, options.scale, drop, sh, workspace.f32(), stream());
  check_launch(op);
}

// The CUDA backward's scratch is the row term D [b, n, s], whatever the thread count.
size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int /*threads*/) {
  return k::attention_workspace_floats(b, n, s, d);
}

// The op has checked slots and positions (in range) before routing here.
void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions) {
  k::kv_cache_write(k_cache.f32(), v_cache.f32(), k.f32(), v.f32(), slots.i32(), positions.i32(), k.dim(1), k.dim(2),
                    k.dim(3), k_cache.dim(2), stream());
  check_launch("kv_cache_write");
}

void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale) {
  k::kv_cache_attention_fwd(out.f32(), q.f32(), k_cache.f32(), v_cache.f32(), slots.i32(), positions.i32(), q.dim(1),
                            k_cache.dim(1), q.dim(2), q.dim(3), k_cache.dim(2), scale, stream());
  check_launch("kv_cache_attention_fwd");
}

}  // namespace mt::cuda
