// Owns the types a model stage exchanges with whoever drives it: one micro-batch in host memory,
// the loss sums the reduction needs, and the options of one forward.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt {

// One micro-batch in host memory.
struct MicroBatch {
  TensorView tokens;     // i32 [b, s]
  TensorView labels;     // i32 [b, s]
  TensorView loss_mask;  // f32 [b, s], or empty: every token counts
  // i32 [b, s]: the position of each token (--reset-position-ids: restarting at 0 after each EOD),
  // looked up by the learned position embedding or rotated by RoPE; each in
  // [0, --max-position-embeddings). Empty: position = sequence index.
  TensorView position_ids = {};
  // i32 [b, s]: where each token's document starts (--reset-attention-mask): token i attends to
  // tokens document_start[j, i] .. i of its sequence j, 0 <= document_start[j, i] <= i.
  // Empty: plain causal attention over the whole sequence.
  TensorView document_start = {};
};

// What the loss reduction needs: Megatron's lm loss is loss_sum / num_tokens.
struct LossSums {
  double loss_sum = 0.0;    // Σ mask · token loss
  double num_tokens = 0.0;  // Σ mask
};

struct ForwardOptions {
  uint64_t first_sample = 0;  // global index of the first sample: dropout masks are keyed by the sample
  bool dropout = true;         // false for evaluation
  // 0: no backward follows (evaluation). Otherwise a backward follows, which accumulates
  // grad_scale · d(loss_sum)/dθ; the output layer's share is computed during the last stage's
  // forward, chunk by chunk, so the [s·b, V] logits never exist in full. Only the last stage
  // reads the value; every stage keeps the micro-batch's activations when it is not 0.
  float grad_scale = 0.0f;
  // MoE layers: the gradient their load-balancing and z-losses enter the backward with (Megatron's
  // MoEAuxLossAutoScaler scale: the loss scale over the micro-batches, and here over dp as the
  // main loss's grad_scale is); 0 leaves the losses out.
  float aux_loss_scale = 0.0f;
};

}  // namespace mt
