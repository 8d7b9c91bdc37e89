// The MoE router as ops (Megatron's TopKRouter without the gating GEMM): top-k routing with its
// score function, capacity and token dropping, the load-balancing losses, the z-loss and the
// aux-loss-free expert-bias update. Layouts: logits [T, E] with T = s·b tokens, token t = i·b + j
// for position i of sequence j (Megatron's [s, b] flattened); k = topk.
//
// Ties, everywhere a top-k is taken (experts per token, groups per token, tokens per expert):
// the larger value wins, equal values go to the lower index. Top-k lists come sorted by that order.
// Top-k selections compare f32 values, the ones Megatron compares (softmax scores, logits, σ + bias,
// the aux-loss scores); weights, losses and gradients are computed in double and rounded once.
// NaN ranks above every number in the capacity ranking (as torch.topk ranks it).
//
// The gradient of the router logits is the sum of what the backward ops below accumulate:
// moe_router_bwd (from the combine weights), moe_aux_scores_bwd (from the load-balancing losses)
// and moe_z_loss_bwd. Megatron's MoEAuxLossAutoScaler gives each loss the gradient `dloss` (1, or
// the main loss's backward scale); the caller passes it.
#pragma once

#include <cstdint>

#include "backend/moe_router_args.h"  // MoeRouterOptions, MoeCapacityOptions (E ≤ kMoeMaxExperts)
#include "tensor/tensor.h"

namespace mt {

// ---- Routing (moe_utils.py::topk_routing_with_score_function, group_limited_topk) ----
//
// Per token, with x = logits[t] and `bias` = expert_bias (f32 [E], or empty):
//   softmax, pre_softmax:  select on s = softmax(x);  p_j = s[c_j]
//   softmax, post:         select on x;               p = softmax(x[c_1..c_k])   (refused for k = 1:
//                          every weight would be 1 with zero gradient; Megatron refuses it too)
//   sigmoid:               s = σ(x); select on s + bias (bias only here, refused with softmax);
//                          p_j = s[c_j] / (Σ_l s[c_l] + 1e-20) when k > 1, else s[c_1]
// then p_j ·= scaling_factor when it is set. The bias steers the choice only: the weights come from
// the unbiased s, and the bias gets no gradient.
// Sinkhorn (options.sinkhorn; router.py::sinkhorn_load_balancing): s = σ(x) when k = 1, else
// softmax(x); p_j = s[c_j], neither renormalised nor scaled. Training passes sinkhorn_scores
// f32 [T, E] (moe_sinkhorn_fwd's rows for these tokens) and the top-k compares them; evaluation
// passes none and the top-k compares s. Either way only s carries gradient.
// Group-limited routing (num_groups G, group_topk g): experts split into G groups of E/G in index
// order; a group scores the sum of its top-(k/g) selection values; the best g groups stay, the
// others' experts are excluded, and the k experts come from the rest. Requires g ≤ G, g ≤ k,
// k ≤ g·E/G and G | E. With k = g (groups scored by their maximum) the groups never change the
// choice (ties aside): every top-k expert's group is among the g best.
// probs f32 [T, k] and indices i32 [T, k] (c_1..c_k, best first).
void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const TensorView& sinkhorn_scores, const MoeRouterOptions& options);

// Accumulates dlogits [T, E] from dprobs [T, k], recomputing the row from logits and indices.
// Only the chosen logits get gradient, except with pre_softmax (and Sinkhorn with k > 1), where
// every logit of the row does.
void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& options);

// Sinkhorn's balancing of the choice (moe_utils.py::sinkhorn, run without gradient): scores
// f32 [T, E] = diag(d0)·exp(logits)·diag(d1), the row and column scalings d0 [T], d1 [E] found by
// alternately setting d0_t = (1/T) / (Σ_e d1_e·exp(x_te) + 1e-8) and
// d1_e = (1/E) / (Σ_t d0_t·exp(x_te) + 1e-8) from d1 = 1 until mean_e |Δd1_e| ≤ 1e-4 (every row
// then sums to about 1/T, every column to 1/E). It couples all T tokens: pass every token that
// routes together (the whole micro-batch). scores must not alias logits.
void moe_sinkhorn_fwd(const TensorView& scores, const TensorView& logits);

// ---- Capacity (moe_utils.py::get_capacity, apply_router_token_dropping) ----
//
// Expert capacity C = ceil((T·k / E) · capacity_factor), evaluated in double as Python does
// (so T·k/E = 25 with factor 2.2 gives 56, not 55).
int64_t moe_expert_capacity(int64_t tokens, int64_t experts, int64_t topk, double capacity_factor);

// Dense routing: routing_probs f32 [T, E] and routing_map u8 [T, E] (0/1) from probs, indices [T, k].
// Dropless (no capacity factor): the scatter of probs, and 1 where chosen. With a factor and
// C ≤ T, each expert keeps the C tokens ranked first by
//   probs:    the token's weight for that expert (0 where the token did not choose it),
//   position: chosen before not chosen,
// ties to the lower token index (so position keeps the earliest tokens). The map is then
// "chosen and kept", or with pad_to_capacity every kept slot (exactly C tokens per expert, padding
// slots with weight 0). C > T keeps everything; with pad_to_capacity that is all T tokens for
// every expert, as in Megatron. routing_probs = weight · map.
void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, const MoeCapacityOptions& capacity);

// Accumulates dprobs [T, k] from drouting_probs [T, E]: dprobs[t, j] += drouting_probs[t, c_j] when
// routing_map[t, c_j] (dropped choices get none).
void moe_routing_map_bwd(const TensorView& dprobs, const TensorView& drouting_probs, const TensorView& routing_map,
                         const TensorView& indices);

// counts f32 [E] += Σ_t routing_map[t, e]: tokens per expert, e.g. for the expert-bias update
// (Megatron counts the final map, after dropping and padding).
void moe_tokens_per_expert(const TensorView& counts, const TensorView& routing_map);

// ---- Load-balancing losses (moe_utils.py::compute_routing_scores_for_aux_loss,
//      switch_load_balancing_loss_func; router.py::_apply_{aux,seq_aux,global_aux}_loss) ----
//
// The scores the losses see, and their own top-k (plain top-k of those scores: no bias, no groups,
// no dropping, as in Megatron):
//   softmax: scores = softmax(x)          sigmoid: scores = σ(x) / (Σ_e σ(x_e) + 1e-20)
// counts f32 [B, E] = Σ over the tokens t of sequence j (t mod B = j) of [e in the top-k of scores[t]];
// B = 1 counts the whole micro-batch. T must be a multiple of B. Overwrites scores [T, E] and counts.
void moe_aux_scores_fwd(const TensorView& scores, const TensorView& counts, const TensorView& logits, int64_t topk,
                        MoeScoreFunction score_function);
// Accumulates dlogits [T, E] from dscores [T, E] (through the softmax or the normalised sigmoid).
void moe_aux_scores_bwd(const TensorView& dlogits, const TensorView& dscores, const TensorView& logits,
                        MoeScoreFunction score_function);

// loss f32 [1] = coeff · E / (k · N²) · (1/B) · Σ_j Σ_e (Σ_{t in sequence j} scores[t, e]) · counts[j, e]
// with N = total_tokens (per sequence when B > 1). The three Megatron losses are this op with:
//   aux_loss:        B = 1, counts summed over tp×cp, N = T·|tp×cp|
//   seq_aux_loss:    B = b sequences, counts [b, E] summed over tp×cp, N = s·|tp×cp| (local s)
//   global_aux_loss: B = 1, counts = the running mean, over the global batch's micro-batches so
//                    far, of the counts summed over tp×dp×cp; N = T·|tp×dp×cp|
void moe_aux_loss_fwd(const TensorView& loss, const TensorView& scores, const TensorView& counts,
                      int64_t total_tokens, int64_t topk, double coeff);
// Accumulates dscores [T, E] += dloss · coeff · E / (k · N² · B) · counts[t mod B, e] (counts are
// integer counts: no gradient).
void moe_aux_loss_bwd(const TensorView& dscores, float dloss, const TensorView& counts, int64_t total_tokens,
                      int64_t topk, double coeff);

// ---- z-loss (moe_utils.py::z_loss_func) ----
// loss f32 [1] = coeff · mean_t (logsumexp_e logits[t, e])². Megatron's router passes
// --moe-z-loss-coeff / |tp×cp| as coeff.
void moe_z_loss_fwd(const TensorView& loss, const TensorView& logits, double coeff);
// Accumulates dlogits [T, E] += dloss · coeff · 2 · lse_t · softmax(logits[t])_e / T.
void moe_z_loss_bwd(const TensorView& dlogits, float dloss, const TensorView& logits, double coeff);

// ---- Aux-loss-free balancing (moe_utils.py::get_updated_expert_bias) ----
// expert_bias f32 [..., E] (one row per layer) updated in place from tokens_per_expert (same shape:
// the global batch's counts summed over tp×dp×cp):
//   bias[e] += rate · sign(mean_e' counts[e'] − counts[e])   (f32 arithmetic, as Megatron's)
// so under-loaded experts gain, over-loaded lose, and an expert exactly at the mean stays.
void moe_expert_bias_update(const TensorView& expert_bias, const TensorView& tokens_per_expert, float rate);

}  // namespace mt
