#include "model/layer.h"

#include "model/blocks/norm_act.h"
#include "backend/backend.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"

namespace mt {

std::array<TensorView*, 21> LayerWeights::all() {
  const auto a = attention.all();
  const auto m = mlp.all();
  const auto e = moe.all();
  return {&input_norm.weight, &input_norm.bias, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], &mlp_norm.weight,
          &mlp_norm.bias, m[0], m[1], m[2], m[3], e[0], e[1], e[2], e[3], e[4]};
}

std::array<TensorView*, 11> LayerActivations::stored() {
  return {&attention.q_pre, &attention.k_pre, &attention.q, &attention.k, &attention.v, &attention.context,
          &residual1, &mlp.fc1_out, &moe.pre_act, &moe.shared.fc1_out, &out};
}

LayerActivations alloc_layer_activations(Arena& a, const ModelConfig& c, LayerShape shape, DType dtype,
                                         MlpKinds kinds, bool with_output) {
  const int64_t Nl = shape.local_rows(), h = c.hidden_size;
  LayerActivations act;
  act.norm1 = alloc_norm_stats(a, c, Nl);
  act.attention = alloc_attention_saved(a, c, shape, dtype);
  // Dropout masks only where there is dropout (an empty mask is dropout off).
  const bool dropout = c.hidden_dropout > 0.0f;
  if (dropout) act.attn_drop_mask = a.alloc(DType::u8, {Nl, h});
  act.residual1 = a.alloc(dtype, {Nl, h});
  act.norm2 = alloc_norm_stats(a, c, Nl);
  if (kinds.dense) act.mlp = alloc_mlp_saved(a, c, shape, dtype);
  if (kinds.moe && !c.recompute_moe) act.moe = alloc_moe_saved(a, c, shape, dtype);
  if (dropout) act.mlp_drop_mask = a.alloc(DType::u8, {Nl, h});
  if (with_output) act.out = a.alloc(dtype, {Nl, h});
  return act;
}

LayerScratch alloc_layer_scratch_fwd(Arena& a, const ModelConfig& c, LayerShape shape, MlpKinds kinds,
                                     WorkspaceTarget target) {
  const int64_t Nl = shape.local_rows(), h = c.hidden_size;
  LayerScratch sc;
  sc.norm1_out = a.alloc(DType::f32, {Nl, h});
  sc.norm2_out = a.alloc(DType::f32, {Nl, h});
  sc.dense = a.alloc(DType::f32, {Nl, h});
  sc.attention = alloc_attention_scratch_fwd(a, c, shape, target);
  if (kinds.dense) sc.mlp = alloc_mlp_scratch_fwd(a, c, shape);
  if (kinds.moe) sc.moe = alloc_moe_scratch_fwd(a, c, shape);
  return sc;
}

void alloc_layer_scratch_bwd(Arena& a, LayerScratch& sc, const ModelConfig& c, LayerShape shape,
                             WorkspaceTarget target, MlpKinds kinds) {
  sc.dnorm = a.alloc(DType::f32, {shape.local_rows(), c.hidden_size});
  alloc_attention_scratch_bwd(a, sc.attention, c, shape, target);
  if (kinds.dense) alloc_mlp_scratch_bwd(a, sc.mlp, c, shape);
  if (kinds.moe) alloc_moe_scratch_bwd(a, sc.moe, c, shape);
}

namespace {

// Where an MoE block keeps what its backward reads: the layer's activations, or under
// --recompute-modules moe the scratch its forward is rerun into.
const MoeSaved& moe_saved(const ModelConfig& c, const LayerActivations& act, const LayerScratch& sc) {
  return c.recompute_moe ? sc.moe.recomputed : act.moe;
}

}  // namespace

void transformer_layer_fwd(const LayerContext& ctx, const LayerWeights& w, const TensorView& x,
                           const LayerActivations& act, const LayerScratch& sc, bool with_output) {
  const ModelConfig& c = *ctx.config;
  norm_fwd(c, sc.norm1_out, act.norm1, x, w.input_norm);
  ctx.round(sc.norm1_out);
  attention_block_fwd(ctx, w.attention, sc.norm1_out, act.attention, sc.attention, sc.sp_gathered, sc.sp_partial,
                      sc.dense);
  dropout_add_fwd(act.residual1, act.attn_drop_mask, sc.dense, x, ctx.hidden_dropout(),
                  dropout_stream(ctx.seed, ctx.layer_index, "attention_output"),
                  ctx.residual_rows());
  ctx.round(act.residual1);
  norm_fwd(c, sc.norm2_out, act.norm2, act.residual1, w.mlp_norm);
  ctx.round(sc.norm2_out);
  const RngStream mlp_dropout = dropout_stream(ctx.seed, ctx.layer_index, "mlp_output");
  switch (c.mlp_kind(ctx.layer_index)) {
    case MlpKind::dense:
      mlp_block_fwd(ctx, w.mlp, sc.norm2_out, act.mlp, sc.mlp, sc.sp_gathered, sc.sp_partial, sc.dense, with_output);
      break;
    case MlpKind::moe:  // the backward needs the experts' output: no shortcut
      moe_block_fwd(ctx, w.moe, sc.norm2_out, moe_saved(c, act, sc), sc.moe, sc.sp_gathered, sc.sp_partial, sc.dense);
      break;
  }
  if (!with_output) return dropout_mask(act.mlp_drop_mask, ctx.hidden_dropout(), mlp_dropout, ctx.residual_rows());
  dropout_add_fwd(act.out, act.mlp_drop_mask, sc.dense, act.residual1, ctx.hidden_dropout(), mlp_dropout,
                  ctx.residual_rows());
  ctx.round(act.out);
}

void transformer_layer_bwd(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                           const TensorView& x, const LayerActivations& act, const LayerScratch& sc,
                           const TensorView& dx) {
  const ModelConfig& c = *ctx.config;
  // Activation gradients are 16-bit tensors in Megatron too (that is where fp16 overflows), so
  // each is rounded as it is produced; weight gradients accumulate in f32. Each norm output is
  // remade before its block's backward (the norms recompute their own statistics, the same
  // values as saved).
  norm_fwd(c, sc.norm2_out, act.norm2, act.residual1, w.mlp_norm);
  ctx.round(sc.norm2_out);
  // MLP block. dx holds d(out); the residual passes it to d(residual1) unchanged, and the norm
  // backward below adds the branch's contribution into the same buffer.
  zero(sc.dense);
  dropout_bwd(sc.dense, dx, act.mlp_drop_mask, ctx.hidden_dropout());
  ctx.round(sc.dense);
  switch (c.mlp_kind(ctx.layer_index)) {
    case MlpKind::dense:
      mlp_block_bwd(ctx, w.mlp, g.mlp, sc.norm2_out, act.mlp, sc.mlp, sc.sp_gathered, sc.sp_partial, sc.dense,
                    sc.dnorm);
      break;
    case MlpKind::moe:
      if (c.recompute_moe) {  // the same routing and rows as the forward (no statistics this time)
        LayerContext rerun = ctx;
        rerun.moe_stats = nullptr;
        moe_block_fwd(rerun, w.moe, sc.norm2_out, sc.moe.recomputed, sc.moe, sc.sp_gathered, sc.sp_partial, sc.dnorm);
      }
      moe_block_bwd(ctx, w.moe, g.moe, sc.norm2_out, moe_saved(c, act, sc), sc.moe, sc.sp_gathered, sc.sp_partial,
                    sc.dense, sc.dnorm);
      break;
  }
  norm_bwd(c, dx, g.mlp_norm, sc.dnorm, act.residual1, w.mlp_norm, act.norm2);
  ctx.round(dx);
  // Attention block; dx now holds d(residual1).
  norm_fwd(c, sc.norm1_out, act.norm1, x, w.input_norm);
  ctx.round(sc.norm1_out);
  zero(sc.dense);
  dropout_bwd(sc.dense, dx, act.attn_drop_mask, ctx.hidden_dropout());
  ctx.round(sc.dense);
  attention_block_bwd(ctx, w.attention, g.attention, sc.norm1_out, act.attention, sc.attention, sc.sp_gathered,
                      sc.sp_partial, sc.dense, sc.dnorm);
  norm_bwd(c, dx, g.input_norm, sc.dnorm, x, w.input_norm, act.norm1);
  ctx.round(dx);
}

}  // namespace mt
