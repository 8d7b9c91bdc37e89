// Owns the argument type of the attention kernels (AttentionOptions), shared by ops/attention.h
// (the op contract and layouts: q [b, n, s, d], k and v [b, g, s, d]) and every backend's kernels;
// it lives here because backends sit below ops.
#pragma once

#include <cstdint>

#include "backend/seq_rows.h"  // SeqRows
#include "base/rng.h"
#include "tensor/tensor.h"

namespace mt {

// How RoPE pairs the rotated elements of a head row (--rotary-interleaved). With r = 2·cos.dim(1)
// rotated elements (the first r of the row; the rest pass through unrotated) and pair c < r/2
// turned by angle[p, c]:
//   rotate_half: elements (c, c + r/2), Megatron's default _rotate_half (Llama, GPT-NeoX);
//   interleaved: elements (2c, 2c + 1), Megatron's rotary_interleaved (RoFormer, GPT-J).
enum class RopeForm { rotate_half, interleaved };

struct AttentionOptions {
  float scale = 1.0f;        // usually 1/√d
  float dropout_p = 0.0f;    // attention dropout on the probabilities
  RngStream rng;             // for the dropout mask
  int64_t head_offset = 0;   // global index of this shard's first query head (tensor parallelism)
  int64_t total_heads = 0;   // global query heads; 0 means n
  uint64_t first_sample = 0;  // global index of the sample in batch position 0
  // Context parallelism (lean path only): the positions of the query rows and of the key rows, and
  // the positions per sequence S (0: the query rows' s). Key t is visible to query i when
  // k_rows.position(t) <= q_rows.position(i); a query that sees no key gets out 0, lse −inf.
  SeqRows q_rows, k_rows;
  int64_t seq_length = 0;
  // Dropout of probability (batch j, local head h, query i, key t) uses
  //   rng.uniform((((first_sample + j)·total_heads + head_offset + h)·S + pi)·S + pt), keep when >= dropout_p
  // with pi, pt the positions of query i and key t (i, t and S = s without context parallelism)
  // (keyed by the global sample, so the micro-batch grouping does not change a mask)
  // (the same index with or without key_start; masked entries draw nothing).
  // Document-aware causal mask (--reset-attention-mask): i32 [b, s] with 0 <= key_start[j, i] <= i;
  // query i of sequence j attends to keys t with key_start[j, i] <= t <= i (the tokens of its own
  // document up to itself). Empty: plain causal, t <= i. Values out of range throw mt::Error.
  TensorView key_start;
};

}  // namespace mt
