// Owns the argument type of the attention kernels (AttentionOptions), shared by ops/attention.h
// (the op contract and layouts: q [b, n, s, d], k and v [b, g, s, d]) and every backend's kernels;
// it lives here because backends sit below ops.
#pragma once

#include <cstdint>
#include <limits>

#include "base/hd.h"
#include "base/rng.h"
#include "tensor/tensor.h"

namespace mt {

// How RoPE pairs the rotated elements of a head row (--rotary-interleaved). With r = 2·cos.dim(1)
// rotated elements (the first r of the row; the rest pass through unrotated) and pair c < r/2
// turned by angle[p, c]:
//   rotate_half: elements (c, c + r/2), Megatron's default _rotate_half (Llama, GPT-NeoX);
//   interleaved: elements (2c, 2c + 1), Megatron's rotary_interleaved (RoFormer, GPT-J).
enum class RopeForm { rotate_half, interleaved };

// Where the rows of q (or of k and v) sit in their sequences. A context-parallel shard holds one or
// two runs of consecutive positions: rows 0 .. split − 1 at positions first, first + 1, ..., rows
// split, split + 1, ... at positions second, second + 1, ...; positions increase (second >=
// first + split), so the keys a query sees are always a prefix of the key rows. The default is
// the identity (row i at position i), every attention outside context parallelism.
struct SeqRows {
  int64_t first = 0;
  int64_t split = std::numeric_limits<int64_t>::max();  // rows in the first run
  int64_t second = 0;                                   // position of row `split`

  static SeqRows run(int64_t first) { return {first, std::numeric_limits<int64_t>::max(), 0}; }
  static SeqRows runs(int64_t first, int64_t split, int64_t second) { return {first, split, second}; }
  MT_HD int64_t position(int64_t i) const { return i < split ? first + i : second + (i - split); }
  // How many of `rows` rows have position <= p (a prefix).
  MT_HD int64_t visible(int64_t p, int64_t rows) const {
    const int64_t in_first = rows < split ? rows : split;
    int64_t n = p - first + 1;
    n = n < 0 ? 0 : (n > in_first ? in_first : n);
    if (rows <= split || n < in_first) return n;
    int64_t m = p - second + 1;
    m = m < 0 ? 0 : (m > rows - split ? rows - split : m);
    return n + m;
  }
  bool identity(int64_t rows) const { return first == 0 && (rows <= split || second == split); }
  bool operator==(const SeqRows&) const = default;
};

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
