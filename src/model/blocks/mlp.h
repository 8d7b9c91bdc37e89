// Owns the dense MLP block (Megatron's MLP):
//   out[Nl, h] = linear_fc2(act(linear_fc1(inp[Nl, h])))
// linear_fc1 is column parallel (SwiGLU: gate and up halves, each split t ways), linear_fc2 row
// parallel; the residual dropout and add around it belong to the layer. A layer picks its MLP
// block by ModelConfig::mlp_kind; an MoE block will sit beside this one.
#pragma once

#include <array>

#include "backend/arena.h"
#include "model/layer_context.h"

namespace mt {

struct MlpWeights {
  TensorView fc1_weight, fc1_bias;  // [ffn or 2·ffn, h]
  TensorView fc2_weight, fc2_bias;  // [h, ffn], [h]
  std::array<TensorView*, 4> all() { return {&fc1_weight, &fc1_bias, &fc2_weight, &fc2_bias}; }
};

// Kept between forward and backward (activation dtype). The activation's output is not kept:
// the backward recomputes it from fc1_out (one elementwise pass).
struct MlpSaved {
  TensorView fc1_out;  // [N, ffn or 2·ffn]  (empty when recomputed: --recompute-modules mlp, or shared_experts)
};

struct MlpScratch {
  TensorView act_out;  // [N, ffn]            made in the forward, remade in the backward
  TensorView fc1_out;  // [N, ffn or 2·ffn]   under --recompute-modules mlp only: fc1's output, remade in the backward
  // Backward only:
  TensorView dfc1;     // [N, ffn or 2·ffn]
  TensorView dact;     // [N, ffn]
};

MlpSaved alloc_mlp_saved(Arena& arena, const ModelConfig& c, LayerShape shape, DType dtype);
MlpScratch alloc_mlp_scratch_fwd(Arena& arena, const ModelConfig& c, LayerShape shape);
void alloc_mlp_scratch_bwd(Arena& arena, MlpScratch& sc, const ModelConfig& c, LayerShape shape);

// All tensors f32, activations rounded to ctx.act_dtype as produced. inp: [Nl, h] (the pre-MLP
// norm's output); out: [Nl, h] overwritten. with_output = false stops after fc1 (a rerun before
// the backward that needs only what the backward reads) and leaves out untouched.
void mlp_block_fwd(const LayerContext& ctx, const MlpWeights& w, const TensorView& inp, const MlpSaved& saved,
                   const MlpScratch& sc, const TensorView& sp_gathered, const TensorView& sp_partial,
                   const TensorView& out, bool with_output = true);
// din [Nl, h] overwritten with d(inp); weight gradients accumulate into g. dout [Nl, h].
void mlp_block_bwd(const LayerContext& ctx, const MlpWeights& w, const MlpWeights& g, const TensorView& inp,
                   const MlpSaved& saved, const MlpScratch& sc, const TensorView& sp_gathered,
                   const TensorView& sp_partial, const TensorView& dout, const TensorView& din);

}  // namespace mt
