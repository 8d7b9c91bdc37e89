// Attention CUDA kernels, plain fp32 and deterministic (no float atomics): the per-element
// arithmetic is backend/math/attention_math.h's, which the CPU kernels run too; these kernels are
// only the mapping of threads to elements and tiles.
//   RoPE tables, QKV split + RoPE: one thread per (row, rotated pair or unrotated element) in
//     grid-stride loops.
//   Lean forward: one block per (batch, head, tile of kFwdQ query rows); key/value tiles of kFwdK
//     rows streamed through shared memory; one warp per query row for the online-softmax update
//     (lane = key column); out and lse written once at the end.
//   Lean backward: D = rowsum(dout ⊙ out) into the workspace; then one kernel over key tiles
//     (dk, dv: each block loops over its group's query heads and all query tiles) and one over
//     query tiles (dq: each block loops over key tiles), each recomputing P and dS per element
//     with the same function, so every output element is summed by one thread in a fixed order.
//   Probs path: one block per query row for the forward (scores, softmax and mask written to the
//     row, then out); the backward reuses the lean backward's tile kernels, reading P and the mask
//     instead of recomputing them.
//   KV cache: one thread per copied element; one block per (token, head) for the attention,
//     keys in chunks of the block size merged by the online softmax.
// Fast path (later, on a GPU): wgmma tiles fed by TMA for the products, P kept in registers,
// lse-based causal tile skipping; the per-element functions stay the ones shared with the CPU.
#include <cfloat>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/runtime.h"
#include "backend/math/attention_math.h"

namespace mt::cuda::k {

namespace {

// ---- RoPE and the QKV split -------------------------------------------------------------------

__global__ void rope_tables_kernel(float* cos_t, float* sin_t, int64_t positions, int64_t half, int64_t rotary_dim,
                                   double base) {
  const int64_t d = rotary_dim;
  MT_GRID_LOOP(e, positions * half) {
    const int64_t p = e / half, i = e % half;
    // In double and rounded once, as the CPU does.
    const double angle = static_cast<double>(p) * pow(base, -2.0 * static_cast<double>(i) / d);
    cos_t[e] = static_cast<float>(::cos(angle));
    sin_t[e] = static_cast<float>(::sin(angle));
  }
}

// The column of qkv [s, b, g·(r + 2)·d] that element (row = i·b + j, head slot, column c) of a
// group lives in; slot < r: query head gi·r + slot, r: key, r + 1: value.
struct SplitIndex {
  int64_t i, j, gi, slot, c;
};
__device__ inline SplitIndex split_index(int64_t e, const AttentionShape& sh, int64_t cols_per_slot) {
  const int64_t r = sh.n / sh.g, slots = sh.g * (r + 2);
  SplitIndex x;
  x.c = e % cols_per_slot;
  int64_t rest = e / cols_per_slot;
  const int64_t slot_all = rest % slots;
  rest /= slots;
  x.j = rest % sh.b;
  x.i = rest / sh.b;
  x.gi = slot_all / (r + 2);
  x.slot = slot_all % (r + 2);
  return x;
}
// Offset of head row (j, head, i) in q [b, n, s, d] (query slots) or k/v [b, g, s, d].
__device__ inline int64_t split_target(const SplitIndex& x, const AttentionShape& sh) {
  const int64_t r = sh.n / sh.g;
  if (x.slot < r) return ((x.j * sh.n + x.gi * r + x.slot) * sh.s + x.i) * sh.d;
  return ((x.j * sh.g + x.gi) * sh.s + x.i) * sh.d;
}

// Work units of a head slot: without RoPE one per element; with RoPE one per rotated pair (units
// c < half: elements rope_pair(c)) and one per unrotated element (units c >= half: element
// c + half, i.e. 2·half .. d − 1). Value slots are copied by the same units, unrotated.
__device__ inline int64_t split_units(const AttentionShape& sh, const RopeArgs& rope) {
  return rope.cos != nullptr ? sh.d - rope.half : sh.d;
}

__global__ void qkv_split_fwd_kernel(float* q, float* k, float* v, const float* qkv, RopeArgs rope,
                                     AttentionShape sh) {
  const int64_t r = sh.n / sh.g, half = rope.half;
  const bool rotating = rope.cos != nullptr;
  const int64_t per_slot = split_units(sh, rope);
  MT_GRID_LOOP(e, sh.s * sh.b * sh.g * (r + 2) * per_slot) {
    const SplitIndex x = split_index(e, sh, per_slot);
    const float* src = qkv + ((x.i * sh.b + x.j) * sh.g * (r + 2) + x.gi * (r + 2) + x.slot) * sh.d;
    float* dst = (x.slot < r ? q : x.slot == r ? k : v) + split_target(x, sh);
    if (!rotating || x.c >= half) {  // an unrotated element
      const int64_t col = rotating ? x.c + half : x.c;
      dst[col] = src[col];
      continue;
    }
    int64_t a, b;
    rope_pair(x.c, half, rope.interleaved, a, b);
    if (x.slot == r + 1) {  // values are never rotated
      dst[a] = src[a];
      dst[b] = src[b];
      continue;
    }
    const int64_t p = rope.positions ? rope.positions[x.j * sh.s + x.i] : x.i;
    rope_rotate(src[a], src[b], rope.cos[p * half + x.c], rope.sin[p * half + x.c], dst[a], dst[b]);
  }
}

__global__ void qkv_split_bwd_kernel(float* dqkv, const float* dq, const float* dk, const float* dv, RopeArgs rope,
                                     AttentionShape sh) {
  const int64_t r = sh.n / sh.g, half = rope.half;
  const bool rotating = rope.cos != nullptr;
  const int64_t per_slot = split_units(sh, rope);
  MT_GRID_LOOP(e, sh.s * sh.b * sh.g * (r + 2) * per_slot) {
    const SplitIndex x = split_index(e, sh, per_slot);
    float* dst = dqkv + ((x.i * sh.b + x.j) * sh.g * (r + 2) + x.gi * (r + 2) + x.slot) * sh.d;
    const float* src = (x.slot < r ? dq : x.slot == r ? dk : dv) + split_target(x, sh);
    if (!rotating || x.c >= half) {
      const int64_t col = rotating ? x.c + half : x.c;
      dst[col] += src[col];
      continue;
    }
    int64_t a, b;
    rope_pair(x.c, half, rope.interleaved, a, b);
    if (x.slot == r + 1) {
      dst[a] += src[a];
      dst[b] += src[b];
      continue;
    }
    const int64_t p = rope.positions ? rope.positions[x.j * sh.s + x.i] : x.i;
    rope_rotate_back_add(src[a], src[b], rope.cos[p * half + x.c], rope.sin[p * half + x.c], dst[a], dst[b]);
  }
}

}  // namespace

void rope_tables(float* cos, float* sin, int64_t positions, int64_t half, int64_t rotary_dim, double base,
                 cudaStream_t st) {
  rope_tables_kernel<<<grid_for(positions * half), kThreads, 0, st>>>(cos, sin, positions, half, rotary_dim, base);
}

void qkv_split_rope_fwd(float* q, float* k, float* v, const float* qkv, RopeArgs rope, AttentionShape sh,
                        cudaStream_t st) {
  const int64_t n = sh.s * sh.b * (sh.n + 2 * sh.g) * sh.d;
  qkv_split_fwd_kernel<<<grid_for(n), kThreads, 0, st>>>(q, k, v, qkv, rope, sh);
}

void qkv_split_rope_bwd(float* dqkv, const float* dq, const float* dk, const float* dv, RopeArgs rope,
                        AttentionShape sh, cudaStream_t st) {
  const int64_t n = sh.s * sh.b * (sh.n + 2 * sh.g) * sh.d;
  qkv_split_bwd_kernel<<<grid_for(n), kThreads, 0, st>>>(dqkv, dq, dk, dv, rope, sh);
}


// ---- lean attention: shared pieces ------------------------------------------------------------

namespace {

constexpr int kWarp = 32;
constexpr int kFwdQ = 16;       // query rows per forward block
constexpr int kFwdK = kWarp;    // keys per forward tile: one warp lane per key column
constexpr int kFwdThreads = 256;
constexpr int kBwdQ = 16;       // query rows per backward tile
constexpr int kBwdK = 16;       // key rows per backward tile
constexpr int kBwdThreads = kBwdQ * kBwdK;  // one thread per (query, key) element of a tile

__device__ inline float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Σ_c a[c]·b[c] in ascending c (one thread's fixed order).
__device__ inline float dot(const float* a, const float* b, int64_t d) {
  float acc = 0.0f;
  for (int64_t c = 0; c < d; ++c) acc += a[c] * b[c];
  return acc;
}

__device__ inline int64_t key_start_of(const int32_t* key_start, int64_t j, int64_t i, int64_t s) {
  return key_start ? static_cast<int64_t>(key_start[j * s + i]) : 0;
}

// The smallest key start of queries i0 .. i0 + mq − 1 (0 when plain causal): keys before it are
// masked for the whole query tile.
__device__ inline int64_t tile_key_min(const int32_t* key_start, int64_t j, int64_t i0, int64_t mq, int64_t s) {
  if (!key_start) return 0;
  int64_t lo = i0;
  for (int64_t ii = 0; ii < mq; ++ii) lo = min(lo, static_cast<int64_t>(key_start[j * s + i0 + ii]));
  return lo;
}

// Dropout multiplier of probability (j, h, i, t): 1/(1 − p) when kept, 0 when dropped.
__device__ inline float dropout_mult(const AttentionDropout& drop, int64_t j, int64_t h, int64_t i, int64_t t,
                                     int64_t s) {
  const uint64_t index = attention_dropout_index(j, h, i, t, drop.total_heads, drop.head_offset, s);
  return attention_dropout_keep(drop.seed, drop.stream, index, drop.threshold) ? drop.inv_keep : 0.0f;
}

// Offset of row i of head (j, h) in out / dout [s, b, n·d].
__device__ inline int64_t out_row(const AttentionShape& sh, int64_t j, int64_t h, int64_t i) {
  return (i * sh.b + j) * sh.n * sh.d + h * sh.d;
}

// Shared memory above the default 48 KB needs the kernel's limit raised first.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    MT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

// ---- lean forward -----------------------------------------------------------------------------

size_t fwd_smem_floats(int64_t d) { return 2 * kFwdQ * d + kFwdK * (d + 1) + kFwdQ * kFwdK + 3 * kFwdQ; }

__global__ void __launch_bounds__(kFwdThreads)
    attention_fwd_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* key_start, float scale, AttentionDropout drop, AttentionShape sh) {
  extern __shared__ float smem[];
  const int64_t d = sh.d, s = sh.s, ldk = d + 1;
  float* sq = smem;                  // [kFwdQ, d]       the query tile
  float* so = sq + kFwdQ * d;        // [kFwdQ, d]       unnormalised output accumulator
  float* skv = so + kFwdQ * d;       // [kFwdK, d + 1]   key tile, then value tile (padded rows)
  float* sp = skv + kFwdK * ldk;     // [kFwdQ, kFwdK]   scores, then (dropped) probabilities
  float* sm = sp + kFwdQ * kFwdK;    // [kFwdQ] running max
  float* sl = sm + kFwdQ;            // [kFwdQ] running normaliser
  float* scorr = sl + kFwdQ;         // [kFwdQ] this tile's rescale of so
  __shared__ int64_t s_first_key;

  const int64_t tiles = (s + kFwdQ - 1) / kFwdQ;
  const int64_t jh = blockIdx.x / tiles, j = jh / sh.n, h = jh % sh.n, gi = h / (sh.n / sh.g);
  const int64_t i0 = (blockIdx.x % tiles) * kFwdQ, mq = min(static_cast<int64_t>(kFwdQ), s - i0), kend = i0 + mq;
  const float* qp = q + ((j * sh.n + h) * s + i0) * d;
  const float* kp = k + (j * sh.g + gi) * s * d;
  const float* vp = v + (j * sh.g + gi) * s * d;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp, warps = kFwdThreads / kWarp;

  for (int64_t e = tid; e < kFwdQ * d; e += kFwdThreads) {
    sq[e] = e / d < mq ? qp[e] : 0.0f;
    so[e] = 0.0f;
  }
  if (tid < kFwdQ) {
    sm[tid] = -INFINITY;
    sl[tid] = 0.0f;
  }
  // Key tiles wholly before every query's document start are skipped (they are all masked).
  if (tid == 0) s_first_key = tile_key_min(key_start, j, i0, mq, s) / kFwdK * kFwdK;
  __syncthreads();

  for (int64_t t0 = s_first_key; t0 < kend; t0 += kFwdK) {
    const int64_t nk = min(static_cast<int64_t>(kFwdK), kend - t0);
    for (int64_t e = tid; e < kFwdK * d; e += kFwdThreads) {
      const int64_t tt = e / d, c = e % d;
      skv[tt * ldk + c] = tt < nk ? kp[(t0 + tt) * d + c] : 0.0f;
    }
    __syncthreads();
    for (int e = tid; e < kFwdQ * kFwdK; e += kFwdThreads)
      sp[e] = scale * dot(sq + (e / kFwdK) * d, skv + (e % kFwdK) * ldk, d);
    __syncthreads();
    // Online-softmax update, one warp per query row, lane = key column of the tile.
    for (int ii = warp; ii < kFwdQ; ii += warps) {
      if (ii >= mq) continue;
      const int64_t i = i0 + ii, t = t0 + lane;
      const bool live = lane < nk && t <= i && t >= key_start_of(key_start, j, i, s);
      const float x = live ? sp[ii * kFwdK + lane] : -INFINITY;
      const float tile_max = warp_max(x);
      if (tile_max == -INFINITY) {  // no live key of this row in this tile
        sp[ii * kFwdK + lane] = 0.0f;
        if (lane == 0) scorr[ii] = 1.0f;
        continue;
      }
      const float m_old = sm[ii], m_new = fmaxf(m_old, tile_max);
      float p = live ? attention_exp(x - m_new) : 0.0f;
      const float sum = warp_sum(p);
      const float corr = m_new != m_old ? online_softmax_rescale(m_old, m_new) : 1.0f;
      __syncwarp();  // every lane has read sm[ii] before lane 0 rewrites it
      if (lane == 0) {
        sl[ii] = sl[ii] * corr + sum;  // the normaliser uses the probabilities before dropout
        sm[ii] = m_new;
        scorr[ii] = corr;
      }
      if (drop.on && live) p *= dropout_mult(drop, j, h, i, t, s);
      sp[ii * kFwdK + lane] = p;
    }
    __syncthreads();  // the key tile is no longer read: load the values over it
    for (int64_t e = tid; e < kFwdK * d; e += kFwdThreads) {
      const int64_t tt = e / d, c = e % d;
      skv[tt * ldk + c] = tt < nk ? vp[(t0 + tt) * d + c] : 0.0f;
    }
    __syncthreads();
    for (int64_t e = tid; e < mq * d; e += kFwdThreads) {
      const int64_t ii = e / d, c = e % d;
      float acc = so[e] * scorr[ii];
      for (int64_t tt = 0; tt < nk; ++tt) acc += sp[ii * kFwdK + tt] * skv[tt * ldk + c];
      so[e] = acc;
    }
    __syncthreads();
  }
  for (int64_t e = tid; e < mq * d; e += kFwdThreads) {
    const int64_t ii = e / d, c = e % d;
    out[out_row(sh, j, h, i0 + ii) + c] = so[e] * (1.0f / sl[ii]);
  }
  if (tid < mq) lse[(j * sh.n + h) * s + i0 + tid] = online_softmax_lse(sm[tid], sl[tid]);
}

// ---- backward (both paths) --------------------------------------------------------------------

// Where P and the dropout multipliers come from: recomputed from q, k, lse and Philox (lean), or
// read from the saved probs and u8 mask (probs path).
struct GradSource {
  const float* lse;      // lean: [b, n, s]
  const float* probs;    // probs path: [b, n, s, s]
  const uint8_t* mask;   // probs path with dropout: [b, n, s, s]
  const float* d_row;    // D [b, n, s] (the workspace)
};

// The dropped probability pd (for dV) and dS (for dQ, dK) of element (i, t) of head (j, h), given
// its query row q_i and dout row, key row k_t and value row v_t; 0 for masked elements.
__device__ inline void grad_element(const GradSource& src, const AttentionDropout& drop, const AttentionShape& sh,
                                    const int32_t* key_start, float scale, int64_t j, int64_t h, int64_t i,
                                    int64_t t, const float* qi, const float* doi, const float* kt, const float* vt,
                                    float& pd, float& ds) {
  pd = ds = 0.0f;
  if (t > i || t < key_start_of(key_start, j, i, sh.s)) return;
  const int64_t row = (j * sh.n + h) * sh.s + i;
  float p, mult = 1.0f;
  if (src.probs) {
    p = src.probs[row * sh.s + t];
    if (drop.on) mult = static_cast<float>(src.mask[row * sh.s + t]) * drop.inv_keep;
  } else {
    p = attention_exp(scale * dot(qi, kt, sh.d) - src.lse[row]);
    if (drop.on) mult = dropout_mult(drop, j, h, i, t, sh.s);
  }
  const float dp = dot(doi, vt, sh.d);
  if (drop.on) {
    pd = p * mult;
    ds = softmax_grad(p, dp * mult, src.d_row[row]);
  } else {
    pd = p;
    ds = softmax_grad(p, dp, src.d_row[row]);
  }
}

// Lean D[j, h, i] = dout_i · out_i: one warp per row.
__global__ void lean_rowterm_kernel(float* d_row, const float* dout, const float* out, AttentionShape sh) {
  const int64_t rows = sh.b * sh.n * sh.s;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows;
       row += warps) {
    const int64_t jh = row / sh.s, i = row % sh.s, j = jh / sh.n, h = jh % sh.n;
    const float* go = dout + out_row(sh, j, h, i);
    const float* o = out + out_row(sh, j, h, i);
    float acc = 0.0f;
    for (int64_t c = threadIdx.x % kWarp; c < sh.d; c += kWarp) acc += go[c] * o[c];
    acc = warp_sum(acc);
    if (threadIdx.x % kWarp == 0) d_row[row] = acc;
  }
}

// Probs-path D[j, h, i] = Σ_t P_it·dP_it·mult over live keys: one block per row.
__global__ void probs_rowterm_kernel(float* d_row, const float* dout, const float* probs, const uint8_t* mask,
                                     const float* v, const int32_t* key_start, AttentionDropout drop,
                                     AttentionShape sh) {
  const int64_t rows = sh.b * sh.n * sh.s;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t jh = row / sh.s, i = row % sh.s, j = jh / sh.n, h = jh % sh.n, gi = h / (sh.n / sh.g);
    const float* go = dout + out_row(sh, j, h, i);
    const float* vp = v + (j * sh.g + gi) * sh.s * sh.d;
    float acc = 0.0f;
    for (int64_t t = key_start_of(key_start, j, i, sh.s) + threadIdx.x; t <= i; t += blockDim.x) {
      float dp = dot(go, vp + t * sh.d, sh.d);
      if (drop.on) dp *= static_cast<float>(mask[row * sh.s + t]) * drop.inv_keep;
      acc += probs[row * sh.s + t] * dp;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) d_row[row] = acc;
  }
}

size_t dkdv_smem_floats(int64_t d) {
  return 2 * kBwdK * (d + 1) + 2 * kBwdK * d + 2 * kBwdQ * d + 2 * kBwdQ * kBwdK;
}

// dk, dv of one key tile of group (j, gi): loops over the group's query heads and the query tiles
// that can see the tile; each (key, column) sum is one thread's, in a fixed order.
__global__ void __launch_bounds__(kBwdThreads)
    attention_dkdv_kernel(float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                          const int32_t* key_start, float scale, AttentionDropout drop, AttentionShape sh,
                          GradSource src) {
  extern __shared__ float smem[];
  const int64_t d = sh.d, s = sh.s, ldk = d + 1, r = sh.n / sh.g;
  float* sk = smem;                   // [kBwdK, d + 1]
  float* sv = sk + kBwdK * ldk;       // [kBwdK, d + 1]
  float* sdk = sv + kBwdK * ldk;      // [kBwdK, d]  Σ dS·q (scaled at the end)
  float* sdv = sdk + kBwdK * d;       // [kBwdK, d]  Σ pd·dout
  float* sq = sdv + kBwdK * d;        // [kBwdQ, d]
  float* sdo = sq + kBwdQ * d;        // [kBwdQ, d]
  float* sp = sdo + kBwdQ * d;        // [kBwdQ, kBwdK] pd
  float* sds = sp + kBwdQ * kBwdK;    // [kBwdQ, kBwdK] dS

  const int64_t tiles = (s + kBwdK - 1) / kBwdK;
  const int64_t jg = blockIdx.x / tiles, j = jg / sh.g, gi = jg % sh.g;
  const int64_t t0 = (blockIdx.x % tiles) * kBwdK, nk = min(static_cast<int64_t>(kBwdK), s - t0);
  const float* kp = k + (jg * s + t0) * d;
  const float* vp = v + (jg * s + t0) * d;
  const int tid = threadIdx.x, eq = tid / kBwdK, ek = tid % kBwdK;

  for (int64_t e = tid; e < kBwdK * d; e += kBwdThreads) {
    const int64_t tt = e / d, c = e % d;
    sk[tt * ldk + c] = tt < nk ? kp[e] : 0.0f;
    sv[tt * ldk + c] = tt < nk ? vp[e] : 0.0f;
    sdk[e] = sdv[e] = 0.0f;
  }
  for (int64_t hh = 0; hh < r; ++hh) {
    const int64_t h = gi * r + hh;
    const float* qh = q + (j * sh.n + h) * s * d;
    // Causal: only queries i >= t0 see the tile.
    for (int64_t i0 = t0 / kBwdQ * kBwdQ; i0 < s; i0 += kBwdQ) {
      const int64_t mq = min(static_cast<int64_t>(kBwdQ), s - i0);
      __syncthreads();  // the previous tile's sq, sdo, sp, sds are no longer read
      for (int64_t e = tid; e < kBwdQ * d; e += kBwdThreads) {
        const int64_t ii = e / d, c = e % d;
        sq[e] = ii < mq ? qh[(i0 + ii) * d + c] : 0.0f;
        sdo[e] = ii < mq ? dout[out_row(sh, j, h, i0 + ii) + c] : 0.0f;
      }
      __syncthreads();
      float pd = 0.0f, ds = 0.0f;
      if (eq < mq && ek < nk)
        grad_element(src, drop, sh, key_start, scale, j, h, i0 + eq, t0 + ek, sq + eq * d, sdo + eq * d,
                     sk + ek * ldk, sv + ek * ldk, pd, ds);
      sp[tid] = pd;
      sds[tid] = ds;
      __syncthreads();
      for (int64_t e = tid; e < nk * d; e += kBwdThreads) {
        const int64_t tt = e / d, c = e % d;
        float av = sdv[e], ak = sdk[e];
        for (int64_t ii = 0; ii < mq; ++ii) {
          av += sp[ii * kBwdK + tt] * sdo[ii * d + c];
          ak += sds[ii * kBwdK + tt] * sq[ii * d + c];
        }
        sdv[e] = av;
        sdk[e] = ak;
      }
    }
  }
  __syncthreads();
  float* dkp = dk + (jg * s + t0) * d;
  float* dvp = dv + (jg * s + t0) * d;
  for (int64_t e = tid; e < nk * d; e += kBwdThreads) {
    dkp[e] += scale * sdk[e];
    dvp[e] += sdv[e];
  }
}

size_t dq_smem_floats(int64_t d) { return 3 * kBwdQ * d + 2 * kBwdK * (d + 1) + kBwdQ * kBwdK; }

// dq of one query tile of head (j, h): loops over the key tiles it sees.
__global__ void __launch_bounds__(kBwdThreads)
    attention_dq_kernel(float* dq, const float* dout, const float* q, const float* k, const float* v,
                        const int32_t* key_start, float scale, AttentionDropout drop, AttentionShape sh,
                        GradSource src) {
  extern __shared__ float smem[];
  const int64_t d = sh.d, s = sh.s, ldk = d + 1;
  float* sq = smem;                  // [kBwdQ, d]
  float* sdo = sq + kBwdQ * d;       // [kBwdQ, d]
  float* sdq = sdo + kBwdQ * d;      // [kBwdQ, d]  Σ dS·k (scaled at the end)
  float* sk = sdq + kBwdQ * d;       // [kBwdK, d + 1]
  float* sv = sk + kBwdK * ldk;      // [kBwdK, d + 1]
  float* sds = sv + kBwdK * ldk;     // [kBwdQ, kBwdK]
  __shared__ int64_t s_first_key;

  const int64_t tiles = (s + kBwdQ - 1) / kBwdQ;
  const int64_t jh = blockIdx.x / tiles, j = jh / sh.n, h = jh % sh.n, gi = h / (sh.n / sh.g);
  const int64_t i0 = (blockIdx.x % tiles) * kBwdQ, mq = min(static_cast<int64_t>(kBwdQ), s - i0), kend = i0 + mq;
  const float* qp = q + (jh * s + i0) * d;
  const float* kp = k + (j * sh.g + gi) * s * d;
  const float* vp = v + (j * sh.g + gi) * s * d;
  const int tid = threadIdx.x, eq = tid / kBwdK, ek = tid % kBwdK;

  for (int64_t e = tid; e < kBwdQ * d; e += kBwdThreads) {
    const int64_t ii = e / d, c = e % d;
    sq[e] = ii < mq ? qp[e] : 0.0f;
    sdo[e] = ii < mq ? dout[out_row(sh, j, h, i0 + ii) + c] : 0.0f;
    sdq[e] = 0.0f;
  }
  if (tid == 0) s_first_key = tile_key_min(key_start, j, i0, mq, s) / kBwdK * kBwdK;
  __syncthreads();
  for (int64_t t0 = s_first_key; t0 < kend; t0 += kBwdK) {
    const int64_t nk = min(static_cast<int64_t>(kBwdK), kend - t0);
    for (int64_t e = tid; e < kBwdK * d; e += kBwdThreads) {
      const int64_t tt = e / d, c = e % d;
      sk[tt * ldk + c] = tt < nk ? kp[(t0 + tt) * d + c] : 0.0f;
      sv[tt * ldk + c] = tt < nk ? vp[(t0 + tt) * d + c] : 0.0f;
    }
    __syncthreads();
    float pd = 0.0f, ds = 0.0f;
    if (eq < mq && ek < nk)
      grad_element(src, drop, sh, key_start, scale, j, h, i0 + eq, t0 + ek, sq + eq * d, sdo + eq * d,
                   sk + ek * ldk, sv + ek * ldk, pd, ds);
    sds[tid] = ds;
    __syncthreads();
    for (int64_t e = tid; e < mq * d; e += kBwdThreads) {
      const int64_t ii = e / d, c = e % d;
      float acc = sdq[e];
      for (int64_t tt = 0; tt < nk; ++tt) acc += sds[ii * kBwdK + tt] * sk[tt * ldk + c];
      sdq[e] = acc;
    }
    __syncthreads();  // sk, sv, sds are reloaded next
  }
  for (int64_t e = tid; e < mq * d; e += kBwdThreads) dq[(jh * s + i0) * d + e] += scale * sdq[e];
}

void launch_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                     const float* v, const int32_t* key_start, float scale, AttentionDropout drop, AttentionShape sh,
                     GradSource src, cudaStream_t st) {
  const size_t dkdv_bytes = dkdv_smem_floats(sh.d) * sizeof(float);
  allow_smem(attention_dkdv_kernel, dkdv_bytes);
  const int64_t key_tiles = (sh.s + kBwdK - 1) / kBwdK;
  attention_dkdv_kernel<<<static_cast<unsigned>(sh.b * sh.g * key_tiles), kBwdThreads, dkdv_bytes, st>>>(
      dk, dv, dout, q, k, v, key_start, scale, drop, sh, src);
  const size_t dq_bytes = dq_smem_floats(sh.d) * sizeof(float);
  allow_smem(attention_dq_kernel, dq_bytes);
  const int64_t query_tiles = (sh.s + kBwdQ - 1) / kBwdQ;
  attention_dq_kernel<<<static_cast<unsigned>(sh.b * sh.n * query_tiles), kBwdThreads, dq_bytes, st>>>(
      dq, dout, q, k, v, key_start, scale, drop, sh, src);
}

// ---- probs forward ----------------------------------------------------------------------------

// One block per query row (j, h, i): scores into the probs row, softmax over the live keys, the
// dropout mask, then out. Thread x owns row entries x, x + blockDim, ... until the barrier before
// the output loop, which reads the whole row.
__global__ void attention_probs_fwd_kernel(float* out, float* probs, uint8_t* mask, const float* q, const float* k,
                                           const float* v, const int32_t* key_start, float scale,
                                           AttentionDropout drop, AttentionShape sh) {
  const int64_t rows = sh.b * sh.n * sh.s, d = sh.d, s = sh.s;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t jh = row / s, i = row % s, j = jh / sh.n, h = jh % sh.n, gi = h / (sh.n / sh.g);
    const float* kp = k + (j * sh.g + gi) * s * d;
    const float* vp = v + (j * sh.g + gi) * s * d;
    float* prow = probs + row * s;
    const float* qrow = q + row * d;  // read by every thread: the cache serves it
    const int64_t lo = key_start_of(key_start, j, i, s);
    float mx = -INFINITY;
    for (int64_t t = threadIdx.x; t < s; t += blockDim.x) {
      const bool live = t >= lo && t <= i;
      const float x = live ? scale * dot(qrow, kp + t * d, d) : 0.0f;
      prow[t] = x;
      if (live) mx = fmaxf(mx, x);
    }
    mx = block_max(mx);
    float sum = 0.0f;
    for (int64_t t = threadIdx.x; t < s; t += blockDim.x) {
      if (t < lo || t > i) continue;
      const float p = attention_exp(prow[t] - mx);
      prow[t] = p;
      sum += p;
    }
    const float inv = 1.0f / block_sum(sum);
    for (int64_t t = threadIdx.x; t < s; t += blockDim.x) {
      const bool live = t >= lo && t <= i;
      if (live) prow[t] *= inv;
      if (drop.on)
        mask[row * s + t] =
            live && attention_dropout_keep(drop.seed, drop.stream,
                                           attention_dropout_index(j, h, i, t, drop.total_heads, drop.head_offset, s),
                                           drop.threshold)
                ? 1
                : 0;
    }
    __syncthreads();  // the row and mask are complete: every thread reads all of them below
    float* orow = out + out_row(sh, j, h, i);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      float acc = 0.0f;
      for (int64_t t = lo; t <= i; ++t) {
        const float w = drop.on ? prow[t] * static_cast<float>(mask[row * s + t]) * drop.inv_keep : prow[t];
        acc += w * vp[t * d + c];
      }
      orow[c] = acc;
    }
  }
}

// Blocks for a loop over `rows`, capped (the kernels stride over the rest).
unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65536 ? (rows < 1 ? 1 : rows) : 65536); }

}  // namespace

void attention_fwd(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* key_start,
                   float scale, AttentionDropout drop, AttentionShape sh, cudaStream_t st) {
  const size_t bytes = fwd_smem_floats(sh.d) * sizeof(float);
  allow_smem(attention_fwd_kernel, bytes);
  const int64_t tiles = (sh.s + kFwdQ - 1) / kFwdQ;
  attention_fwd_kernel<<<static_cast<unsigned>(sh.b * sh.n * tiles), kFwdThreads, bytes, st>>>(
      out, lse, q, k, v, key_start, scale, drop, sh);
}

size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d) {
  return static_cast<size_t>(b * n * s);
}

void attention_bwd(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                   const float* q, const float* k, const float* v, const int32_t* key_start, float scale,
                   AttentionDropout drop, AttentionShape sh, float* workspace, cudaStream_t st) {
  lean_rowterm_kernel<<<grid_for(sh.b * sh.n * sh.s * kWarp), kThreads, 0, st>>>(workspace, dout, out, sh);
  launch_backward(dq, dk, dv, dout, q, k, v, key_start, scale, drop, sh, GradSource{lse, nullptr, nullptr, workspace},
                  st);
}

__global__ void attention_merge_kernel(float* out, float* lse, const float* out_part, const float* lse_part,
                                       AttentionShape sh) {
  MT_GRID_LOOP(e, sh.b * sh.n * sh.s * sh.d) {
    const int64_t row = e / sh.d, c = e % sh.d;
    const int64_t j = row / (sh.n * sh.s), h = row / sh.s % sh.n, i = row % sh.s;
    float merged, wa, wb;
    lse_merge(lse[row], lse_part[row], merged, wa, wb);
    const int64_t at = out_row(sh, j, h, i) + c;
    out[at] = out[at] * wa + out_part[at] * wb;
  }
}

__global__ void attention_merge_lse_kernel(float* lse, const float* lse_part, int64_t rows) {
  MT_GRID_LOOP(row, rows) {
    float merged, wa, wb;
    lse_merge(lse[row], lse_part[row], merged, wa, wb);
    lse[row] = merged;
  }
}

void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part, AttentionShape sh,
                     cudaStream_t st) {
  // The outputs read the old lse, so they go first.
  attention_merge_kernel<<<grid_for(sh.b * sh.n * sh.s * sh.d), kThreads, 0, st>>>(out, lse, out_part, lse_part, sh);
  attention_merge_lse_kernel<<<grid_for(sh.b * sh.n * sh.s), kThreads, 0, st>>>(lse, lse_part, sh.b * sh.n * sh.s);
}

void attention_probs_fwd(float* out, float* probs, uint8_t* mask, const float* q, const float* k, const float* v,
                         const int32_t* key_start, float scale, AttentionDropout drop, AttentionShape sh,
                         cudaStream_t st) {
  attention_probs_fwd_kernel<<<row_blocks(sh.b * sh.n * sh.s), kThreads, 0, st>>>(out, probs, mask, q, k, v,
                                                                                  key_start, scale, drop, sh);
}

void attention_probs_bwd(float* dq, float* dk, float* dv, const float* dout, const float* probs, const uint8_t* mask,
                         const float* q, const float* k, const float* v, const int32_t* key_start, float scale,
                         AttentionDropout drop, AttentionShape sh, float* workspace, cudaStream_t st) {
  probs_rowterm_kernel<<<row_blocks(sh.b * sh.n * sh.s), kThreads, 0, st>>>(workspace, dout, probs, mask, v,
                                                                            key_start, drop, sh);
  launch_backward(dq, dk, dv, dout, q, k, v, key_start, scale, drop, sh, GradSource{nullptr, probs, mask, workspace},
                  st);
}

// ---- KV cache ---------------------------------------------------------------------------------

namespace {

// One thread per copied element. Rows of one step name distinct (slot, position) pairs (the
// CPU, copying rows in order, would keep the last of two rows naming the same one).
__global__ void kv_cache_write_kernel(float* k_cache, float* v_cache, const float* k, const float* v,
                                      const int32_t* slots, const int32_t* positions, int64_t g, int64_t tokens,
                                      int64_t d, int64_t max_len) {
  MT_GRID_LOOP(e, tokens * g * d) {
    const int64_t t = e / (g * d), h = (e / d) % g, c = e % d;
    const int64_t at = ((static_cast<int64_t>(slots[t]) * g + h) * max_len + positions[t]) * d + c;
    const int64_t from = (h * tokens + t) * d + c;
    k_cache[at] = k[from];
    v_cache[at] = v[from];
  }
}

// One block per (token, query head): keys 0..position of the token's slot in chunks of blockDim
// (one score per thread), each chunk merged into the running max, normaliser and output by the
// online softmax. dynamic smem: the query row and accumulator [2, d], then the chunk's weights.
__global__ void kv_cache_attention_kernel(float* out, const float* q, const float* k_cache, const float* v_cache,
                                          const int32_t* slots, const int32_t* positions, int64_t n, int64_t g,
                                          int64_t tokens, int64_t d, int64_t max_len, float scale) {
  extern __shared__ float smem[];
  float* sq = smem;        // [d]
  float* acc = sq + d;     // [d]
  float* w = acc + d;      // [blockDim.x]
  for (int64_t task = blockIdx.x; task < tokens * n; task += gridDim.x) {
    const int64_t t = task / n, h = task % n;
    const int64_t base = (static_cast<int64_t>(slots[t]) * g + h / (n / g)) * max_len * d;
    const float* keys = k_cache + base;
    const float* values = v_cache + base;
    const int64_t last = positions[t];
    __syncthreads();  // the previous task's readers are done
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
      sq[c] = q[(h * tokens + t) * d + c];
      acc[c] = 0.0f;
    }
    __syncthreads();
    float running_max = -INFINITY, sum = 0.0f;
    for (int64_t p0 = 0; p0 <= last; p0 += blockDim.x) {
      const int64_t p = p0 + threadIdx.x;
      const float score = p <= last ? scale * dot(sq, keys + p * d, d) : -INFINITY;
      const float m_new = fmaxf(running_max, block_max(score));
      const float corr = online_softmax_rescale(running_max, m_new);  // 0 on the first chunk
      const float wp = p <= last ? online_softmax_rescale(score, m_new) : 0.0f;  // exp(score − max)
      w[threadIdx.x] = wp;
      sum = sum * corr + block_sum(wp);  // block_sum's barriers also publish w
      const int64_t count = min(static_cast<int64_t>(blockDim.x), last + 1 - p0);
      for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
        float a = acc[c] * corr;
        for (int64_t pp = 0; pp < count; ++pp) a += w[pp] * values[(p0 + pp) * d + c];
        acc[c] = a;
      }
      running_max = m_new;
      __syncthreads();  // w is rewritten by the next chunk
    }
    const float inv = 1.0f / sum;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) out[t * n * d + h * d + c] = acc[c] * inv;
  }
}

}  // namespace

void kv_cache_write(float* k_cache, float* v_cache, const float* k, const float* v, const int32_t* slots,
                    const int32_t* positions, int64_t g, int64_t tokens, int64_t d, int64_t max_len, cudaStream_t st) {
  kv_cache_write_kernel<<<grid_for(tokens * g * d), kThreads, 0, st>>>(k_cache, v_cache, k, v, slots, positions, g,
                                                                       tokens, d, max_len);
}

void kv_cache_attention_fwd(float* out, const float* q, const float* k_cache, const float* v_cache,
                            const int32_t* slots, const int32_t* positions, int64_t n, int64_t g, int64_t tokens,
                            int64_t d, int64_t max_len, float scale, cudaStream_t st) {
  const size_t bytes = (2 * d + kThreads) * sizeof(float);
  allow_smem(kv_cache_attention_kernel, bytes);
  kv_cache_attention_kernel<<<row_blocks(tokens * n), kThreads, bytes, st>>>(out, q, k_cache, v_cache, slots,
                                                                             positions, n, g, tokens, d, max_len,
                                                                             scale);
}

}  // namespace mt::cuda::k
