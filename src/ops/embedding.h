// Token embedding plus optional learned absolute position embedding.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt {

// The rows a word table holds: ids [start, start + rows) of a vocabulary of `total` ids (a
// vocab-parallel shard, Megatron's VocabParallelEmbedding). total = 0 means the whole vocabulary.
struct VocabShard {
  int64_t start = 0;
  int64_t total = 0;
};

// tokens and positions are i32 [b, s] (data layout); out is [s, b, h] (activation layout):
//   out[i, j, :] = word[tokens[j, i]] + pos_table[positions[j, i]]
// positions may be empty (then position = i); pos_table may be empty (no position embedding,
// e.g. RoPE models).  A token or position id out of range throws mt::Error naming it.
// With a shard, ids outside the shard's rows contribute a zero word row (the tp all-reduce or
// reduce-scatter then sums the shards).
void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, VocabShard shard = {});

// Accumulates dword[V, h] (rows of the shard's ids only) and dpos_table[P, h] (skipped when
// empty) from dout[s, b, h].
void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, VocabShard shard = {});

}  // namespace mt
