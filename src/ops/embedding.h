// Token embedding plus optional learned absolute position embedding.
#pragma once

#include "tensor/tensor.h"

namespace mt {

// tokens and positions are i32 [b, s] (data layout); out is [s, b, h] (activation layout):
//   out[i, j, :] = word[tokens[j, i]] + pos_table[positions[j, i]]
// positions may be empty (then position = i); pos_table may be empty (no position embedding,
// e.g. RoPE models).  A token or position id out of range throws mt::Error naming it.
void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table);

// Accumulates dword[V, h] and dpos_table[P, h] (skipped when empty) from dout[s, b, h].
void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions);

}  // namespace mt
