#include "model/blocks/output_head.h"

#include <algorithm>

#include "model/blocks/norm_act.h"
#include "backend/backend.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "parallel/mappings.h"

namespace mt {

HeadSaved alloc_head_saved(Arena& a, const ModelConfig& c, LayerShape shape) {
  const int64_t Nl = shape.local_rows();
  HeadSaved saved;
  saved.final_norm = alloc_norm_stats(a, c, Nl);
  // Without sequence parallelism the output layer's input gradient is a [N, h] partial sum here
  // until its all-reduce; with it the partial sums go to scratch and this keeps the local rows.
  saved.dfinal = a.alloc(DType::f32, {Nl, c.hidden_size});
  return saved;
}

void output_head_fwd(const LayerContext& ctx, const HeadWeights& w, const HeadWeights& g, int64_t vocab_start,
                     const TensorView& x, const HeadSaved& saved, const HeadScratch& sc, const HeadRun& run) {
  const ModelConfig& c = *ctx.config;
  const TensorParallel& tp = ctx.tp;
  const bool train = run.grad_scale != 0.0f;
  norm_fwd(c, sc.final_out, saved.final_norm, x, w.final_norm);
  ctx.round(sc.final_out);
  // The output layer is column parallel over the vocabulary: its input is the whole sequence
  // (gathered under sequence parallelism) and its input gradient a partial sum over the shards.
  TensorView input = sc.final_out, dinput = saved.dfinal;
  if (tp.sp()) {
    gather_from_sp_fwd(tp, sc.sp_gathered, sc.final_out);
    input = sc.sp_gathered;
    dinput = sc.sp_partial;
  }
  if (train) zero(dinput);
  const int64_t N = ctx.shape.rows(), chunk = sc.chunk();
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    const TensorView xr = input.rows(r0, rows);
    const TensorView logits = run.logits.empty() ? sc.logits_chunk.rows(0, rows) : run.logits.rows(r0, rows);
    linear_fwd(logits, xr, w.output, TensorView());
    ctx.round(logits);  // Megatron's logits are 16-bit; the loss is f32
    if (run.labels.empty()) continue;
    const TensorView labels = run.labels.rows(r0, rows), lse = sc.lse.rows(0, rows);
    vocab_parallel_cross_entropy_fwd(tp, run.losses.rows(r0, rows), lse, logits, labels, vocab_start, sc.ce);
    if (!train) continue;
    // The loss is the end of the graph, so its gradient is known now: turn the logits into
    // dlogits in place and push them through the output layer before the next chunk reuses them.
    vocab_parallel_cross_entropy_bwd(tp, logits, run.dlosses.rows(r0, rows), logits, lse, labels, vocab_start);
    ctx.round(logits);
    linear_bwd(dinput.rows(r0, rows), g.output, TensorView(), logits, xr, w.output);
  }
  if (!train) return;
  if (tp.sp())
    gather_from_sp_bwd(tp, saved.dfinal, dinput);
  else
    copy_to_tp_bwd(tp, saved.dfinal);
  ctx.round(saved.dfinal);
}

void output_head_bwd(const LayerContext& ctx, const NormWeights& final_norm, const NormWeights& dfinal_norm,
                     const TensorView& x, const HeadSaved& saved, const TensorView& dx) {
  zero(dx);
  norm_bwd(*ctx.config, dx, dfinal_norm, saved.dfinal, x, final_norm, saved.final_norm);
  ctx.round(dx);
}

}  // namespace mt
