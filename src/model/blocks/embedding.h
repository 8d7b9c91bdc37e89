// Owns the embedding block of the first stage (Megatron's LanguageModelEmbedding):
//   out[Nl, h] = dropout(vocab_parallel_embedding(tokens) + position_embedding(positions))
// with the dropout mask drawn from the "embedding" stream of the micro-batch's round.
#pragma once

#include "model/layer_context.h"
#include "ops/embedding.h"

namespace mt {

struct EmbeddingWeights {
  TensorView word;      // [V_padded/t, h]: this tp rank's rows
  TensorView position;  // [max_pos, h] or empty (RoPE)
};

// What one embedding call needs of the micro-batch (device tensors).
struct EmbeddingInputs {
  TensorView tokens;     // i32 [b, s]
  TensorView positions;  // i32 [b, s] or empty: the sequence index
};

// All tensors f32 (the caller stages 16-bit weights). out [Nl, h] is rounded to ctx.act_dtype;
// mask [Nl, h] u8 is saved; `dense` [Nl, h] and `sp_partial` [N, h] (sequence parallelism) are
// scratch. Uses ctx's tp, seed, round, dropout and act_dtype.
void embedding_block_fwd(const LayerContext& ctx, const EmbeddingWeights& w, VocabShard shard,
                         const EmbeddingInputs& in, const TensorView& out, const TensorView& mask,
                         const TensorView& dense, const TensorView& sp_partial);
// Accumulates into g from dout [Nl, h]; `dense` [Nl, h] and `sp_gathered` [N, h] are scratch.
void embedding_block_bwd(const LayerContext& ctx, const EmbeddingWeights& g, VocabShard shard,
                         const EmbeddingInputs& in, const TensorView& dout, const TensorView& mask,
                         const TensorView& dense, const TensorView& sp_gathered);

}  // namespace mt
