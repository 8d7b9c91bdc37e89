// Owns Megatron's tensor-parallel layers (megatron/core/tensor_parallel/layers.py and
// cross_entropy.py) as explicit forward/backward pairs: column- and row-parallel linear,
// vocabulary-parallel embedding and cross entropy, with and without sequence parallelism.
// Rows are tokens in [s, b] order: N of them in full, Nl = N/t per rank under sequence
// parallelism (Nl = N without it). Scratch buffers are the caller's (kernels never allocate) and
// are needed only under sequence parallelism; pass empty views otherwise. With a size-1 group
// every function is the plain op, so single-rank numerics are unchanged.
// Input gradients are overwritten; weight and bias gradients accumulate.
#pragma once

#include "ops/embedding.h"
#include "parallel/tensor_parallel.h"

namespace mt {

// ColumnParallelLinear: weight [O/t, I] and bias [O/t] hold this rank's output rows.
//   out[N, O/t] = gather_from_sp(inp[Nl, I]) · weightᵀ + bias   (copy_to_tp without SP)
// gathered: [N, I] (SP).
void column_parallel_linear_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& inp,
                                const TensorView& weight, const TensorView& bias, const TensorView& gathered);
//   din[Nl, I] = reduce_scatter (SP) or all-reduce of dout · weight;  dweight += doutᵀ · gathered input;
//   dbias += Σ_rows dout. The input is gathered again (as Megatron does) into gathered [N, I];
//   dpartial: [N, I] (SP).
void column_parallel_linear_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dweight,
                                const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                                const TensorView& weight, const TensorView& gathered, const TensorView& dpartial);

// RowParallelLinear: weight [O, I/t] holds this rank's input columns; the bias is whole and is
// added after the reduction.
//   out[Nl, O] = reduce_scatter_to_sp (SP) or reduce_from_tp of (inp[N, I/t] · weightᵀ), + bias
// partial: [N, O] (SP).
void row_parallel_linear_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& inp,
                             const TensorView& weight, const TensorView& bias, const TensorView& partial);
//   din[N, I/t] = gathered dout · weight;  dweight += gathered doutᵀ · inp;  dbias += Σ_rows gathered
//   dout (the whole sequence, so the bias gradient needs no further reduction). gathered: [N, O] (SP).
void row_parallel_linear_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dweight,
                             const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                             const TensorView& weight, const TensorView& gathered);

// VocabParallelEmbedding (+ the learned position embedding, which every rank holds whole):
//   out[Nl, h] = reduce_scatter_to_sp (SP) or reduce_from_tp of (word rows of this rank's shard,
//   zero for other ids, + position rows on tp rank 0 only, so the sum counts them once).
// tokens i32 [b, s]; word [V/t, h] covers ids [shard.start, shard.start + V/t); partial [N, h] (SP).
// positions: i32 [b, s] rows of pos_table (--reset-position-ids), or empty for the sequence index;
// every rank takes them whole (the embedding runs on all N rows before the reduce-scatter).
void vocab_parallel_embedding_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& tokens,
                                  const TensorView& word, const TensorView& pos_table, VocabShard shard,
                                  const TensorView& partial, const TensorView& positions = TensorView());
// dword += rows of this shard; dpos_table += every row (the gradient is gathered first under SP,
// so all ranks compute the same whole-table gradient). gathered: [N, h] (SP).
void vocab_parallel_embedding_bwd(const TensorParallel& tp, const TensorView& dword, const TensorView& dpos_table,
                                  const TensorView& dout, const TensorView& tokens, VocabShard shard,
                                  const TensorView& gathered, const TensorView& positions = TensorView());

// Scratch of the vocabulary-parallel cross entropy: three f32 [rows] vectors.
struct CrossEntropyScratch {
  TensorView row_max, sum_exp, target;
};
// VocabParallelCrossEntropy: logits [rows, V/t] hold columns [vocab_start, vocab_start + V/t);
// losses[rows] and lse[rows] come out whole on every rank after three all-reduces (max, target
// logit, Σ exp), never gathering the logits.
void vocab_parallel_cross_entropy_fwd(const TensorParallel& tp, const TensorView& losses, const TensorView& lse,
                                      const TensorView& logits, const TensorView& labels, int64_t vocab_start,
                                      const CrossEntropyScratch& scratch);
// dlogits[rows, V/t] = dlosses · (softmax − onehot) on this shard; no communication.
void vocab_parallel_cross_entropy_bwd(const TensorParallel& tp, const TensorView& dlogits, const TensorView& dlosses,
                                      const TensorView& logits, const TensorView& lse, const TensorView& labels,
                                      int64_t vocab_start);

}  // namespace mt
