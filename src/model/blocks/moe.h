// Owns the mixture-of-experts MLP block (Megatron's MoELayer):
//   logits = router(inp)                       [Nl, E]   (TopKRouter's gating GEMM, no bias)
//   probs, experts = top-k routing of logits   (ops/moe_router.h), capacity dropping
//   out = Σ_{e routed} p_e · expert_e(inp) (+ shared_expert(inp))
// with the experts run over the tokens permuted into per-expert row groups (ops/moe_experts.h).
// The load-balancing loss and the z-loss do not change the output: like Megatron's
// MoEAuxLossAutoScaler they add their gradient into the router's in the backward, scaled by the
// micro-batch's aux_loss_scale, and report their values to the layer's MoeLayerStats.
//
// This rank's tokens are the residual stream's Nl rows (its sequence shard under --sequence-parallel).
// They reach the ranks holding their experts through the token dispatcher
// (parallel/expert_dispatch.h, over LayerContext::experts; a single rank when experts are whole),
// and the load-balancing counts are summed over the tensor-parallel group, as Megatron sums them
// over tp×cp. Sinkhorn routing (training) normalises over the whole micro-batch: each rank gathers
// the shards' router logits, so every layout routes as one rank does (Megatron normalises each
// rank's shard alone).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/arena.h"
#include "model/blocks/mlp.h"
#include "model/layer_context.h"
#include "parallel/expert_dispatch.h"

namespace mt {

struct MoeWeights {
  TensorView router_weight;  // [E, h]
  TensorView experts_fc1;    // [E_l, f1, h]: this rank's experts' linear_fc1 (f1 = ffn_moe/etp, or twice under SwiGLU)
  TensorView experts_fc2;    // [E_l, h, ffn_moe/etp]
  MlpWeights shared;         // the shared expert: fc1 [f1_shared/t, h], fc2 [h, ffn_shared/t]; empty without one
  // --moe-router-enable-expert-bias: f32 [E], steers the top-k only; a state buffer updated after
  // each step from the global token counts (no gradient), so not among all()'s parameters.
  TensorView expert_bias;
  std::array<TensorView*, 5> all() {
    return {&router_weight, &experts_fc1, &experts_fc2, &shared.fc1_weight, &shared.fc2_weight};
  }
};

// Kept between forward and backward. The experts' rows are carved at the dispatcher's worst case
// R = moe_max_rows(); a micro-batch uses the first dispatch->num_rows of them.
struct MoeSaved {
  TensorView logits;         // [Nl, E] f32: the router's output
  TensorView probs;          // [Nl, k] f32: the chosen experts' weights
  TensorView indices;        // [Nl, k] i32: the chosen experts, best first
  TensorView routing_probs;  // [Nl, E] f32: weight · kept
  TensorView routing_map;    // [Nl, E] u8: kept (or padding) slots
  TensorView aux_counts;     // [B, E] f32: the load-balancing loss's top-k counts, summed over tp (if any)
  // The dispatch: the experts' input rows, the permutation and the combine's weights and rows
  // (shared, so that copying the struct never allocates).
  std::shared_ptr<ExpertDispatchSaved> dispatch;
  TensorView pre_act;        // [R, f1]  the experts' fc1 output (activation dtype)
  MlpSaved shared;           // the shared expert's fc1 output
};

// Host copies of what the block reads on the host (statistics, the global_aux_loss running mean),
// sized once at carve time, so the model's own tensors stay on its device.
struct MoeHostMirror {
  std::vector<int32_t> indices;      // [Nl·k]
  std::vector<uint8_t> routing_map;  // [Nl·E]
  std::vector<float> counts;         // [B·E] the load-balancing counts
  float loss = 0.0f;                 // one loss value
};

// Scratch shared by every layer (never saved).
struct MoeScratch {
  TensorView act;            // [R, ffn_moe] the experts' activation output, made in forward and backward
  TensorView expert_out;     // [R, h] forward: the experts' output rows; backward: their gradient
  TensorView shared_out;     // [Nl, h] forward: the shared expert's output; backward: its input gradient
  TensorView loss;           // [1] f32 one loss value
  TensorView aux_scores;     // [Nl, E] the load-balancing loss's scores (forward only: the backward remakes them)
  // Sinkhorn only, f32 (c: --context-parallel-size): the micro-batch's router logits, gathered over
  // the sequence shards (sp) into [N, E] and over the context-parallel chunks (raw, then in
  // sequence order) into [c·N, E], and Sinkhorn's scores of every token; under cp this rank's
  // tokens' scores [N, E] are taken back out of them.
  TensorView sinkhorn_logits;  // [N, E] under sp
  TensorView sinkhorn_raw, sinkhorn_whole, sinkhorn_mine;  // [c·N, E] x2, [N, E] under cp
  TensorView sinkhorn_scores;  // [c·N, E]
  std::shared_ptr<ExpertDispatchScratch> dispatch;
  std::shared_ptr<MoeHostMirror> host;  // shared: the scratch is passed const
  MlpScratch shared;
  // --recompute-modules moe: the block's saved tensors (f32), made by the forward and remade before
  // the backward; every layer's block shares them (LayerActivations keep none).
  MoeSaved recomputed;
  // Backward only:
  TensorView dact;           // [R, ffn_moe]
  TensorView dpre_act;       // [R, f1]
  TensorView drows;          // [R, h]
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
  // global_aux_loss: Σ over this iteration's micro-batches of the counts summed over tp × dp, and
  // how many micro-batches (the loss weighs the running mean).
  std::vector<double> global_counts;  // [E]
  int64_t global_steps = 0;
  void reset();
};

// The dispatcher's settings for `tokens` tokens a rank (c: what one rank computes), and the rows
// this rank's experts may receive per micro-batch (expert_dispatch_max_rows). `groups` gives the
// expert-parallel sizes (its communicators may be null: sizes alone).
ExpertDispatchOptions moe_dispatch_options(const ModelConfig& c, int64_t tokens);
int64_t moe_max_rows(const ModelConfig& c, int64_t tokens, const ExpertParallel& groups);
// The sizes the config names (--expert-model-parallel-size, --expert-tensor-parallel-size).
ExpertParallel moe_group_sizes(const ModelConfig& c);
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
