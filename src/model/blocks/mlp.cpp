#include "model/blocks/mlp.h"

#include "model/blocks/norm_act.h"
#include "backend/backend.h"
#include "ops/elementwise.h"
#include "parallel/layers.h"

namespace mt {

namespace {
// Whether fc1's output is remade in the backward (--recompute-modules mlp for a dense layer,
// shared_experts for an MoE layer's shared expert): then the saved struct holds none.
bool recomputes_fc1(const MlpSaved& saved) { return saved.fc1_out.ndim() == 0; }

// fc1's output: saved, or remade into scratch.
TensorView fc1_out(const MlpSaved& saved, const MlpScratch& sc) { return recomputes_fc1(saved) ? sc.fc1_out : saved.fc1_out; }
}  // namespace

MlpSaved alloc_mlp_saved(Arena& a, const ModelConfig& c, LayerShape shape, DType dtype) {
  MlpSaved saved;
  if (!c.recompute_mlp) saved.fc1_out = a.alloc(dtype, {shape.rows(), c.fc1_size()});
  return saved;
}

MlpScratch alloc_mlp_scratch_fwd(Arena& a, const ModelConfig& c, LayerShape shape) {
  MlpScratch sc;
  sc.act_out = a.alloc(DType::f32, {shape.rows(), c.ffn_hidden_size});
  if (c.recompute_mlp) sc.fc1_out = a.alloc(DType::f32, {shape.rows(), c.fc1_size()});
  return sc;
}

void alloc_mlp_scratch_bwd(Arena& a, MlpScratch& sc, const ModelConfig& c, LayerShape shape) {
  sc.dfc1 = a.alloc(DType::f32, {shape.rows(), c.fc1_size()});
  sc.dact = a.alloc(DType::f32, {shape.rows(), c.ffn_hidden_size});
}

void mlp_block_fwd(const LayerContext& ctx, const MlpWeights& w, const TensorView& inp, const MlpSaved& saved,
                   const MlpScratch& sc, const TensorView& sp_gathered, const TensorView& sp_partial,
                   const TensorView& out, bool with_output) {
  const ModelConfig& c = *ctx.config;
  const TensorView fc1 = fc1_out(saved, sc);
  column_parallel_linear_fwd(ctx.tp, fc1, inp, w.fc1_weight, w.fc1_bias, sp_gathered);
  ctx.round(fc1);
  if (!with_output) return;
  mlp_activation_fwd(c, sc.act_out, fc1);
  ctx.round(sc.act_out);
  row_parallel_linear_fwd(ctx.tp, out, sc.act_out, w.fc2_weight, w.fc2_bias, sp_partial);
  ctx.round(out);
}

void mlp_block_bwd(const LayerContext& ctx, const MlpWeights& w, const MlpWeights& g, const TensorView& inp,
                   const MlpSaved& saved, const MlpScratch& sc, const TensorView& sp_gathered,
                   const TensorView& sp_partial, const TensorView& dout, const TensorView& din) {
  const ModelConfig& c = *ctx.config;
  const TensorView fc1 = fc1_out(saved, sc);
  if (recomputes_fc1(saved)) {
    column_parallel_linear_fwd(ctx.tp, fc1, inp, w.fc1_weight, w.fc1_bias, sp_gathered);
    ctx.round(fc1);
  }
  mlp_activation_fwd(c, sc.act_out, fc1);
  ctx.round(sc.act_out);
  row_parallel_linear_bwd(ctx.tp, sc.dact, g.fc2_weight, g.fc2_bias, dout, sc.act_out, w.fc2_weight, sp_gathered);
  ctx.round(sc.dact);
  zero(sc.dfc1);
  mlp_activation_bwd(c, sc.dfc1, sc.dact, fc1);
  ctx.round(sc.dfc1);
  column_parallel_linear_bwd(ctx.tp, din, g.fc1_weight, g.fc1_bias, sc.dfc1, inp, w.fc1_weight, sp_gathered,
                             sp_partial);
  ctx.round(din);
}

}  // namespace mt
