// Owns the mixture-of-experts MLP block (Megatron's MoELayer):
//   logits = router(inp)                       [Nl, E]   (TopKRouter's gating GEMM, no bias)
//   probs, experts = top-k routing of logits   (ops/moe_router.h), capacity dropping
//   out = Σ_{e routed} p_e · expert_e(inp) (+ shared_expert(inp))
// with the experts run over the tokens permuted into per-expert row groups (ops/moe_experts.h).
// The load-balancing loss and the z-loss do not change the output: like Megatron's
// MoEAuxLossAutoScaler they add their gradient into the router's in the backward, scaled by the
// micro-batch's aux_loss_scale, and report their values to the layer's MoeLayerStats.
//
// This rank's tokens are the residual stream's Nl rows (its sequence shard under --sequence-parallel);
// the experts are whole here (expert parallelism degree 1), so the block needs no communication
// except the load-balancing counts, summed over the tensor-parallel group as Megatron sums them
// over tp×cp, and the shared expert's own tensor parallelism.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "backend/arena.h"
#include "model/blocks/mlp.h"
#include "model/layer_context.h"

namespace mt {

struct MoeWeights {
  TensorView router_weight;  // [E, h]
  TensorView experts_fc1;    // [E, f1, h]: every expert's linear_fc1 (f1 = ffn_moe, or 2·ffn_moe with SwiGLU)
  TensorView experts_fc2;    // [E, h, ffn_moe]
  MlpWeights shared;         // the shared expert: fc1 [f1_shared/t, h], fc2 [h, ffn_shared/t]; empty without one
  std::array<TensorView*, 5> all() {
    return {&router_weight, &experts_fc1, &experts_fc2, &shared.fc1_weight, &shared.fc2_weight};
  }
};

// Kept between forward and backward. R = moe_max_rows() rows are carved; a micro-batch uses the
// first Σ tokens_per_expert of them.
struct MoeSaved {
  TensorView logits;             // [Nl, E] f32: the router's output
  TensorView probs;              // [Nl, k] f32: the chosen experts' weights
  TensorView indices;            // [Nl, k] i32: the chosen experts, best first
  TensorView routing_probs;      // [Nl, E] f32: weight · kept
  TensorView routing_map;        // [Nl, E] u8: kept (or padding) slots
  TensorView aux_counts;         // [B, E] f32: the load-balancing loss's top-k counts, summed over tp (if any)
  TensorView row_token;          // [R] i32: the token of each permuted row
  TensorView tokens_per_expert;  // [E] i32
  TensorView rows;               // [R, h]   the permuted tokens (activation dtype)
  TensorView pre_act;            // [R, f1]  the experts' fc1 output (activation dtype)
  TensorView expert_out;         // [R, h]   the experts' output rows, as combined (activation dtype)
  MlpSaved shared;               // the shared expert's fc1 output
};

// Scratch shared by every layer (never saved).
struct MoeScratch {
  TensorView act;            // [R, ffn_moe] the experts' activation output, made in forward and backward
  TensorView shared_out;     // [Nl, h] forward: the shared expert's output; backward: its input gradient
  TensorView loss;           // [1] f32 one loss value
  TensorView aux_scores;     // [Nl, E] the load-balancing loss's scores (forward only: the backward remakes them)
  MlpScratch shared;
  // Backward only:
  TensorView dact;           // [R, ffn_moe]
  TensorView dpre_act;       // [R, f1]
  TensorView drows;          // [R, h]
  TensorView dexpert_out;    // [R, h]
  TensorView dlogits;        // [Nl, E]
  TensorView dprobs;         // [Nl, k]
  TensorView drouting_probs; // [Nl, E]
  TensorView daux_scores;    // [Nl, E]
};

// One MoE layer's figures over an iteration's micro-batches (their training forwards).
struct MoeLayerStats {
  double aux_loss = 0.0;  // Σ over micro-batches of the load-balancing loss / its coefficient (summed over tp)
  double z_loss = 0.0;    // Σ of the z-loss / its coefficient
  int64_t micro_batches = 0;
  std::vector<double> tokens_per_expert;  // [E] rows each expert ran (padding included)
  double choices = 0.0;   // token-expert choices the router made (Nl·k per micro-batch)
  double dropped = 0.0;   // of them, dropped by the capacity
  void reset();
};

// The rows the experts may run per micro-batch for `tokens` tokens: dropless T·k (every token
// goes to k distinct experts); with a capacity C per expert, E·min(C, T) when padded, else
// min(T·k, E·min(C, T)).
int64_t moe_max_rows(const ModelConfig& c, int64_t tokens);
// B of the load-balancing counts: the micro-batch's sequences for seq_aux_loss, else 1.
int64_t moe_aux_count_rows(const ModelConfig& c, int64_t micro_batch);

MoeSaved alloc_moe_saved(Arena& arena, const ModelConfig& c, LayerShape shape, DType dtype);
MoeScratch alloc_moe_scratch_fwd(Arena& arena, const ModelConfig& c, LayerShape shape);
void alloc_moe_scratch_bwd(Arena& arena, MoeScratch& sc, const ModelConfig& c, LayerShape shape);

// All tensors f32 (saved ones as f32 views; the caller stages 16-bit copies), activations rounded
// to ctx.act_dtype as produced. inp: [Nl, h] (the pre-MLP norm's output); out: [Nl, h]
// overwritten. Adds this micro-batch's figures to ctx.moe_stats when it is set.
void moe_block_fwd(const LayerContext& ctx, const MoeWeights& w, const TensorView& inp, const MoeSaved& saved,
                   const MoeScratch& sc, const TensorView& sp_gathered, const TensorView& sp_partial,
                   const TensorView& out);
// din [Nl, h] overwritten with d(inp); weight gradients accumulate into g; the losses' gradient
// enters the router's scaled by ctx.aux_loss_scale. dout [Nl, h].
void moe_block_bwd(const LayerContext& ctx, const MoeWeights& w, const MoeWeights& g, const TensorView& inp,
                   const MoeSaved& saved, const MoeScratch& sc, const TensorView& sp_gathered,
                   const TensorView& sp_partial, const TensorView& dout, const TensorView& din);

}  // namespace mt
