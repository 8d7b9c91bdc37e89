#include "parallel/layers.h"

#include "backend/backend.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "parallel/mappings.h"

namespace mt {

void column_parallel_linear_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& inp,
                                const TensorView& weight, const TensorView& bias, const TensorView& gathered) {
  if (!tp.sp()) return linear_fwd(out, inp, weight, bias);
  gather_from_sp_fwd(tp, gathered, inp);
  linear_fwd(out, gathered, weight, bias);
}

void column_parallel_linear_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dweight,
                                const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                                const TensorView& weight, const TensorView& gathered, const TensorView& dpartial) {
  if (!tp.sp()) {
    zero(din);
    linear_bwd(din, dweight, dbias, dout, inp, weight);
    copy_to_tp_bwd(tp, din);
    return;
  }
  gather_from_sp_fwd(tp, gathered, inp);
  zero(dpartial);
  linear_bwd(dpartial, dweight, dbias, dout, gathered, weight);
  gather_from_sp_bwd(tp, din, dpartial);
}

void row_parallel_linear_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& inp,
                             const TensorView& weight, const TensorView& bias, const TensorView& partial) {
  if (!tp.active()) return linear_fwd(out, inp, weight, bias);
  if (tp.sp()) {
    linear_fwd(partial, inp, weight, TensorView());
    reduce_scatter_to_sp_fwd(tp, out, partial);
  } else {
    linear_fwd(out, inp, weight, TensorView());
    reduce_from_tp_fwd(tp, out);
  }
  if (!bias.empty()) bias_add(out, bias);
}

void row_parallel_linear_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dweight,
                             const TensorView& dbias, const TensorView& dout, const TensorView& inp,
                             const TensorView& weight, const TensorView& gathered) {
  TensorView d = dout;
  if (tp.sp()) {
    reduce_scatter_to_sp_bwd(tp, gathered, dout);
    d = gathered;
  }
  zero(din);
  linear_bwd(din, dweight, dbias, d, inp, weight);
}

void vocab_parallel_embedding_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& tokens,
                                  const TensorView& word, const TensorView& pos_table, VocabShard shard,
                                  const TensorView& partial, const TensorView& positions) {
  const int64_t s = tokens.dim(1), b = tokens.dim(0), h = word.dim(1);
  const TensorView pos = tp.rank() == 0 ? pos_table : TensorView();
  if (!tp.sp()) {
    embedding_fwd(out.reshape({s, b, h}), tokens, positions, word, pos, shard);
    reduce_from_tp_fwd(tp, out);
    return;
  }
  embedding_fwd(partial.reshape({s, b, h}), tokens, positions, word, pos, shard);
  reduce_scatter_to_sp_fwd(tp, out, partial);
}

void vocab_parallel_embedding_bwd(const TensorParallel& tp, const TensorView& dword, const TensorView& dpos_table,
                                  const TensorView& dout, const TensorView& tokens, VocabShard shard,
                                  const TensorView& gathered, const TensorView& positions) {
  const int64_t s = tokens.dim(1), b = tokens.dim(0), h = dword.dim(1);
  TensorView d = dout;
  if (tp.sp()) {
    reduce_scatter_to_sp_bwd(tp, gathered, dout);
    d = gathered;
  }
  embedding_bwd(dword, dpos_table, d.reshape({s, b, h}), tokens, positions, shard);
}

void vocab_parallel_cross_entropy_fwd(const TensorParallel& tp, const TensorView& losses, const TensorView& lse,
                                      const TensorView& logits, const TensorView& labels, int64_t vocab_start,
                                      const CrossEntropyScratch& scratch) {
  if (!tp.active()) {
    MT_CHECK(vocab_start == 0) << "vocab_parallel_cross_entropy_fwd: a size-1 group holds the whole vocabulary";
    return cross_entropy_fwd(losses, lse, logits, labels);
  }
  const int64_t rows = logits.dim(0);
  const TensorView mx = scratch.row_max.rows(0, rows), sum = scratch.sum_exp.rows(0, rows),
                   target = scratch.target.rows(0, rows);
  cross_entropy_shard_max(mx, logits);
  tp.comm->all_reduce(mx, ReduceOp::max);
  cross_entropy_shard_sums(sum, target, logits, labels, mx, vocab_start);
  tp.comm->all_reduce(target, ReduceOp::sum);
  tp.comm->all_reduce(sum, ReduceOp::sum);
  cross_entropy_shard_loss(losses, lse, mx, sum, target);
}

void vocab_parallel_cross_entropy_bwd(const TensorParallel& tp, const TensorView& dlogits, const TensorView& dlosses,
                                      const TensorView& logits, const TensorView& lse, const TensorView& labels,
                                      int64_t vocab_start) {
  if (!tp.active()) return cross_entropy_bwd(dlogits, dlosses, logits, lse, labels);
  cross_entropy_shard_bwd(dlogits, dlosses, logits, lse, labels, vocab_start);
}

}  // namespace mt
