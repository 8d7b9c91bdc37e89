#include "model/blocks/embedding.h"

#include "backend/backend.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "parallel/layers.h"

namespace mt {

void embedding_block_fwd(const LayerContext& ctx, const EmbeddingWeights& w, VocabShard shard,
                         const EmbeddingInputs& in, const TensorView& out, const TensorView& mask,
                         const TensorView& dense, const TensorView& sp_partial) {
  vocab_parallel_embedding_fwd(ctx.tp, dense, in.tokens, w.word, w.position, shard, sp_partial, in.positions);
  ctx.round(dense);
  dropout_fwd(out, mask, dense, ctx.hidden_dropout(), dropout_stream(ctx.seed, -1, "embedding"),
              ctx.residual_rows());
  ctx.round(out);
}

void embedding_block_bwd(const LayerContext& ctx, const EmbeddingWeights& g, VocabShard shard,
                         const EmbeddingInputs& in, const TensorView& dout, const TensorView& mask,
                         const TensorView& dense, const TensorView& sp_gathered) {
  zero(dense);
  dropout_bwd(dense, dout, mask, ctx.hidden_dropout());
  ctx.round(dense);
  vocab_parallel_embedding_bwd(ctx.tp, g.word, g.position, dense, in.tokens, shard, sp_gathered, in.positions);
}

}  // namespace mt
