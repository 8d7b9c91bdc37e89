// Owns the output head of the last stage: final norm -> output layer (column parallel over the
// vocabulary) -> vocab-parallel cross entropy, in chunks of rows so the [N, V] logits never exist
// in full. When training, the loss is the end of the graph, so the gradients of the output
// weight and of the final norm's output are computed during the forward, chunk by chunk.
#pragma once

#include "model/layer.h"
#include "parallel/layers.h"

namespace mt {

struct HeadWeights {
  NormWeights final_norm;
  TensorView output;  // [V_padded/t, h] (the word embedding when tied)
};

// Kept per micro-batch between forward and backward.
struct HeadSaved {
  NormStats final_norm;  // [Nl]
  TensorView dfinal;     // [Nl, h] f32: gradient of the final norm output, made by the forward
};

struct HeadScratch {
  TensorView final_out;     // [Nl, h] final norm output
  TensorView logits_chunk;  // [chunk, V/t] logits, turned into their gradient in place
  TensorView lse;           // [chunk]
  CrossEntropyScratch ce;   // 3 x [chunk] (tensor parallelism)
  TensorView sp_gathered, sp_partial;  // [N, h] (sequence parallelism; owned by the stage)
  int64_t chunk() const { return lse.numel(); }
};

// One head pass. labels i32 [N] in [s, b] row order (empty: no loss); losses [N] receive the
// per-token losses; dlosses [N] = grad_scale · mask (read when grad_scale != 0); logits, when
// not empty, receive every row's logits [N, V/t] (rounded to the activation dtype, as the loss
// sees them).
struct HeadRun {
  TensorView labels, losses, dlosses, logits;
  float grad_scale = 0.0f;
};

HeadSaved alloc_head_saved(Arena& arena, const ModelConfig& c, LayerShape shape);

// x [Nl, h] f32: the last layer's output. ctx supplies tp, act_dtype and the config.
void output_head_fwd(const LayerContext& ctx, const HeadWeights& w, const HeadWeights& g, int64_t vocab_start,
                     const TensorView& x, const HeadSaved& saved, const HeadScratch& sc, const HeadRun& run);
// dx [Nl, h] overwritten with the gradient of x; the final norm's weight gradients accumulate.
void output_head_bwd(const LayerContext& ctx, const NormWeights& final_norm, const NormWeights& dfinal_norm,
                     const TensorView& x, const HeadSaved& saved, const TensorView& dx);

}  // namespace mt
