// Owns one pre-norm transformer layer (Megatron's TransformerLayer), composed of two blocks:
//   a   = x + dropout(attention_block(norm1(x)))
//   out = a + dropout(mlp_block(norm2(a)))
// as an explicit forward/backward pair, with what the backward needs kept in LayerActivations.
// The MLP block is the one ModelConfig::mlp_kind names for the layer.
#pragma once

#include <array>
#include <cstdint>

#include "backend/arena.h"
#include "model/blocks/attention.h"
#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"
#include "model/blocks/norm_act.h"
#include "model/layer_context.h"

namespace mt {

// One layer's weights (or gradients): this tensor-parallel rank's shards.
struct LayerWeights {
  NormWeights input_norm;
  AttentionWeights attention;
  NormWeights mlp_norm;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
  std::array<TensorView*, 21> all();
};

// Saved between forward and backward; shapes in [rows, features] (see LayerShape). The members
// listed by stored() take the activation dtype (16-bit under --bf16/--fp16); norm statistics,
// lse, probabilities and masks stay f32/u8 as in Megatron. The norm outputs are not kept: the
// backward recomputes them from the saved inputs (one elementwise pass each).
struct LayerActivations {
  NormStats norm1;
  AttentionSaved attention;
  TensorView attn_drop_mask;  // [Nl, h] u8
  TensorView residual1;       // [Nl, h]  a
  NormStats norm2;
  MlpSaved mlp;               // dense layers
  MoeSaved moe;               // MoE layers
  TensorView mlp_drop_mask;   // [Nl, h] u8
  TensorView out;             // [Nl, h]  the layer output (next layer's input)
  // The activation-dtype members; the output comes last (kStoredOut).
  std::array<TensorView*, 11> stored();
  static constexpr size_t kStoredOut = 10;
};

// Scratch shared by all layers: transient outputs and backward temporaries (never saved).
struct LayerScratch {
  TensorView norm1_out;  // [Nl, h]  norm outputs, made in the forward and remade in the backward
  TensorView norm2_out;  // [Nl, h]
  TensorView dense;      // [Nl, h]  forward: a block's output; backward: its gradient
  TensorView dnorm;      // [Nl, h]  backward only: gradient of a norm output
  AttentionScratch attention;
  MlpScratch mlp;
  MoeScratch moe;
  // Sequence parallelism only (empty otherwise): a gathered [N, h] input or output gradient, and
  // the [N, h] partial sums before a reduce-scatter. The owner allocates them (its embedding and
  // output layer use them too).
  TensorView sp_gathered, sp_partial;
};

// Carves the saved activations of a layer with MLP blocks of `kinds` (one layer's kind, or several
// for a buffer layers of both kinds share) out of `arena` (a measuring arena gives the size); the
// stored() members in `dtype`, the rest f32/u8. with_output = false leaves `out` empty (the
// caller provides it).
LayerActivations alloc_layer_activations(Arena& arena, const ModelConfig& c, LayerShape shape, DType dtype,
                                         MlpKinds kinds, bool with_output = true);
// The scratch the forward uses (kept through the backward too) ...
// target: what context parallelism's attention scratch is sized for (unused without it).
LayerScratch alloc_layer_scratch_fwd(Arena& arena, const ModelConfig& c, LayerShape shape, MlpKinds kinds,
                                     WorkspaceTarget target);
// ... and what only the backward uses, carved separately so that a forward-only pass can lay
// its own buffers over it (see Arena::overlay).
void alloc_layer_scratch_bwd(Arena& arena, LayerScratch& sc, const ModelConfig& c, LayerShape shape,
                             WorkspaceTarget target, MlpKinds kinds);

// All tensors f32 (the caller stages 16-bit weights and activations); each activation the
// forward produces is rounded to ctx.act_dtype right away, so later ops see the stored values.
// x: [Nl, h] layer input (kept by the caller: it is the previous layer's output).
// with_output = false serves recomputation before the backward when the output is saved already:
// the pass stops once everything the backward reads exists, skipping the MLP activation, fc2 and
// the output residual (a third of the layer's forward FLOPs) and redrawing only the MLP dropout mask.
void transformer_layer_fwd(const LayerContext& ctx, const LayerWeights& w, const TensorView& x,
                           const LayerActivations& act, const LayerScratch& scratch, bool with_output = true);

// dx_inout: [Nl, h]; on entry the gradient of the layer output, on exit the gradient of its input.
// Weight gradients accumulate into g.
void transformer_layer_bwd(const LayerContext& ctx, const LayerWeights& w, const LayerWeights& g,
                           const TensorView& x, const LayerActivations& act, const LayerScratch& scratch,
                           const TensorView& dx_inout);

}  // namespace mt
