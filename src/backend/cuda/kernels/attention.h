// C-style launchers of the attention kernels (RoPE tables, the QKV split + RoPE, the flash-style
// lean attention, the materialising probs attention, the KV cache): raw device pointers, sizes and
// the stream. Implemented in attention.cu; layouts are ops/attention.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mt::cuda::k {

// q [b, n, s, d], k and v [b, g, s, d], out [s, b, n·d].
struct AttentionShape {
  int64_t b, n, g, s, d;
};

// Dropout of the probabilities (AttentionOptions's rng, p and head indexing, resolved).
struct AttentionDropout {
  bool on;
  uint64_t seed, stream;
  uint32_t threshold;  // dropout_threshold(p)
  float inv_keep;      // 1 / (1 − p), computed in f32 as the CPU does
  int64_t total_heads, head_offset;
};

// The largest head dim the plain kernels' shared-memory tiles take (an sm_90 block's limit).
constexpr int64_t kAttentionMaxHeadDim = 512;

// cos/sin [positions, half]: inv_freq[i] = base^(−2i/rotary_dim), half = ceil(rotary_dim / 2).
void rope_tables(float* cos, float* sin, int64_t positions, int64_t half, int64_t rotary_dim, double base,
                 cudaStream_t st);
// The RoPE of the QKV split: cos/sin [P, half] (nullptr: no RoPE); positions i32 [b, s] table rows,
// or nullptr (row = sequence index). The first 2·half elements of each query and key head row are
// rotated in pairs (interleaved: (2c, 2c + 1), else (c, c + half)); the rest are copied.
struct RopeArgs {
  const float* cos;
  const float* sin;
  const int32_t* positions;
  int64_t half;
  bool interleaved;
};
void qkv_split_rope_fwd(float* q, float* k, float* v, const float* qkv, RopeArgs rope, AttentionShape sh,
                        cudaStream_t st);
void qkv_split_rope_bwd(float* dqkv, const float* dq, const float* dk, const float* dv, RopeArgs rope,
                        AttentionShape sh, cudaStream_t st);

// key_start: i32 [b, s] (values already checked), or nullptr for plain causal.
void attention_fwd(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* key_start,
                   float scale, AttentionDropout drop, AttentionShape sh, cudaStream_t st);
// Accumulates into dq, dk, dv. workspace: attention_workspace_floats(sh) floats.
void attention_bwd(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                   const float* q, const float* k, const float* v, const int32_t* key_start, float scale,
                   AttentionDropout drop, AttentionShape sh, float* workspace, cudaStream_t st);
// lse, lse_part [b, n, s]; out, out_part [s, b, n·d] (ops/attention.h's attention_merge).
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, AttentionShape sh,
                     cudaStream_t st);
// mask: u8 [b, n, s, s] when drop.on, else unused (may be nullptr).
void attention_probs_fwd(float* out, float* probs, uint8_t* mask, const float* q, const float* k, const float* v,
                         const int32_t* key_start, float scale, AttentionDropout drop, AttentionShape sh,
                         cudaStream_t st);
void attention_probs_bwd(float* dq, float* dk, float* dv, const float* dout, const float* probs, const uint8_t* mask,
                         const float* q, const float* k, const float* v, const int32_t* key_start, float scale,
                         AttentionDropout drop, AttentionShape sh, float* workspace, cudaStream_t st);
// Either backward's scratch: the row term D [b, n, s].
size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d);

// cache [slots, g, max_len, d]; k, v [1, g, tokens, d]; slots, positions i32 [tokens] (in range).
void kv_cache_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    const int32_t* positions, int64_t g, int64_t tokens, int64_t d, int64_t max_len, cudaStream_t st);
// out [tokens, n·d]; q [1, n, tokens, d].
void kv_cache_attention_fwd(float* out, const float* q, const float* k_cache, const float* v_cache,
                            const int32_t* slots, const int32_t* positions, int64_t n, int64_t g, int64_t tokens,
                            int64_t d, int64_t max_len, float scale, cudaStream_t st);

}  // namespace mt::cuda::k
