// Validates the MoE router ops once for every backend (shapes, options Megatron would refuse), then
// routes to the backend owning the memory. Index values (in range, distinct per row) are read back
// and checked here too: a kernel handed a bad index would write out of bounds.
#include "ops/moe_router.h"
#include "ops/dispatch.h"

#include <cmath>
#include <cstdint>

#include "backend/cpu/moe_router.h"

namespace mt {

namespace {

// Every index in [0, E) and no expert twice in a row (the kernels would silently double-count).
void check_indices(const TensorView& indices, int64_t experts, const char* op) {
  const int64_t rows = indices.dim(0), k = indices.dim(1);
  std::vector<int32_t> copy;
  const int32_t* idx = host_i32(indices, copy);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = idx[t * k + j];
      MT_CHECK(e >= 0 && e < experts) << op << ": indices[" << t << ", " << j << "] = " << e
                                      << " is out of range [0, " << experts << ")";
      for (int64_t l = 0; l < j; ++l)
        MT_CHECK(idx[t * k + l] != e) << op << ": token " << t << " lists expert " << e << " twice";
    }
}

// logits-like f32 [T, E] with 1 ≤ E ≤ kMoeMaxExperts; returns E.
int64_t check_logits(const TensorView& logits, const char* op, const char* name = "logits") {
  check_dtype(logits, DType::f32, op, name);
  MT_CHECK(logits.ndim() == 2 && logits.dim(1) > 0)
      << op << ": " << name << " is " << logits.str() << "; expected [tokens, experts] with experts > 0";
  MT_CHECK(logits.dim(1) <= kMoeMaxExperts)
      << op << ": " << logits.dim(1) << " experts is more than this build's limit of " << kMoeMaxExperts
      << " (kMoeMaxExperts in backend/moe_router_args.h)";
  check_tensor(logits, logits.shape, DType::f32, op, name);
  return logits.dim(1);
}

void check_topk(int64_t topk, int64_t experts, const char* op) {
  MT_CHECK(topk >= 1 && topk <= experts)
      << op << ": --moe-router-topk " << topk << " must be between 1 and the number of experts (" << experts << ")";
}

void check_score_function(MoeScoreFunction f, const char* op) {
  MT_CHECK(f == MoeScoreFunction::softmax || f == MoeScoreFunction::sigmoid)
      << op << ": unknown MoeScoreFunction " << static_cast<int>(f);
}

// The options Megatron's TransformerConfig refuses, refused here too so no caller routes silently wrong.
void check_router_options(const MoeRouterOptions& o, int64_t experts, bool has_bias, const char* op) {
  check_topk(o.topk, experts, op);
  check_score_function(o.score_function, op);
  if (o.sinkhorn) {
    // Megatron's Sinkhorn path ignores these; refused so that none is thought to apply.
    MT_CHECK(o.score_function == MoeScoreFunction::softmax && !o.pre_softmax && o.num_groups == 0 &&
             o.group_topk == 0 && o.scaling_factor == 0.0f && !has_bias)
        << op << ": Sinkhorn routing picks its own score function (sigmoid for --moe-router-topk 1, else softmax); "
        << "--moe-router-score-function, --moe-router-pre-softmax, the group-limited routing flags, "
        << "--moe-router-topk-scaling-factor and the expert bias do not apply to it";
    return;
  }
  const bool softmax = o.score_function == MoeScoreFunction::softmax;
  MT_CHECK(!(softmax && !o.pre_softmax && o.topk == 1))
      << op << ": softmax after a top-1 selection is always 1 and passes no gradient; use "
      << "--moe-router-pre-softmax with --moe-router-topk 1";
  MT_CHECK(!(softmax && has_bias))
      << op << ": the expert bias (--moe-router-enable-expert-bias) needs --moe-router-score-function sigmoid";
  MT_CHECK(std::isfinite(o.scaling_factor))
      << op << ": --moe-router-topk-scaling-factor " << o.scaling_factor << " is not finite";
  if (o.num_groups == 0 && o.group_topk == 0) return;
  MT_CHECK(o.num_groups > 0 && o.group_topk > 0)
      << op << ": group-limited routing needs both --moe-router-num-groups and --moe-router-group-topk (got "
      << o.num_groups << " and " << o.group_topk << ")";
  MT_CHECK(experts % o.num_groups == 0)
      << op << ": " << experts << " experts do not split into --moe-router-num-groups " << o.num_groups;
  MT_CHECK(o.group_topk <= o.num_groups)
      << op << ": --moe-router-group-topk " << o.group_topk << " is more than --moe-router-num-groups "
      << o.num_groups;
  MT_CHECK(o.group_topk <= o.topk)
      << op << ": --moe-router-group-topk " << o.group_topk << " is more than --moe-router-topk " << o.topk
      << ": groups are scored by their top-(topk/group_topk) experts, which would be none";
  MT_CHECK(o.topk <= o.group_topk * (experts / o.num_groups))
      << op << ": --moe-router-topk " << o.topk << " is more than the " << o.group_topk * (experts / o.num_groups)
      << " experts in " << o.group_topk << " selected groups of " << experts / o.num_groups;
}

// probs f32 [T, k] and indices i32 [T, k] for logits [T, E].
void check_topk_pair(const TensorView& probs, const TensorView& indices, int64_t tokens, int64_t topk,
                     const char* op, const char* probs_name) {
  check_tensor(probs, {tokens, topk}, DType::f32, op, probs_name);
  check_tensor(indices, {tokens, topk}, DType::i32, op, "indices");
}

void check_scalar_args(int64_t total_tokens, int64_t topk, double coeff, const char* op) {
  MT_CHECK(total_tokens > 0) << op << ": total_tokens " << total_tokens << " must be positive";
  MT_CHECK(topk >= 1) << op << ": topk " << topk << " must be positive";
  MT_CHECK(std::isfinite(coeff)) << op << ": coefficient " << coeff << " is not finite";
}

// counts f32 [B, E] with B ≥ 1 dividing the token count.
void check_counts(const TensorView& counts, int64_t tokens, int64_t experts, const char* op) {
  check_dtype(counts, DType::f32, op, "counts");
  MT_CHECK(counts.ndim() == 2 && counts.dim(0) >= 1 && counts.dim(1) == experts && tokens % counts.dim(0) == 0)
      << op << ": counts is " << counts.str() << "; expected [sequences, " << experts
      << "] with the sequence count dividing the " << tokens << " tokens";
  check_tensor(counts, counts.shape, DType::f32, op, "counts");
}

}  // namespace

void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const TensorView& sinkhorn_scores, const MoeRouterOptions& options) {
  const char* op = "moe_router_fwd";
  const int64_t experts = check_logits(logits, op);
  check_router_options(options, experts, !expert_bias.empty(), op);
  check_topk_pair(probs, indices, logits.dim(0), options.topk, op, "probs");
  if (!expert_bias.empty()) check_tensor(expert_bias, {experts}, DType::f32, op, "expert_bias");
  MT_CHECK(sinkhorn_scores.empty() || options.sinkhorn)
      << op << ": sinkhorn_scores given, but the options do not route by Sinkhorn";
  if (!sinkhorn_scores.empty()) check_tensor(sinkhorn_scores, logits.shape, DType::f32, op, "sinkhorn_scores");
  check_same_device({probs, indices, logits, expert_bias, sinkhorn_scores}, op);
  MT_ROUTE(logits.device, op, moe_router_fwd(probs, indices, logits, expert_bias, sinkhorn_scores, options));
}

void moe_sinkhorn_fwd(const TensorView& scores, const TensorView& logits) {
  const char* op = "moe_sinkhorn_fwd";
  check_logits(logits, op);
  check_tensor(scores, logits.shape, DType::f32, op, "scores");
  MT_CHECK(logits.numel() == 0 || scores.data != logits.data)
      << op << ": scores must not alias logits (the scaling rereads logits every iteration)";
  check_same_device({scores, logits}, op);
  MT_ROUTE(logits.device, op, moe_sinkhorn_fwd(scores, logits));
}

void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& options) {
  const char* op = "moe_router_bwd";
  const int64_t experts = check_logits(logits, op);
  check_router_options(options, experts, false, op);
  check_tensor(dlogits, logits.shape, DType::f32, op, "dlogits");
  check_topk_pair(dprobs, indices, logits.dim(0), options.topk, op, "dprobs");
  check_same_device({dlogits, dprobs, logits, indices}, op);
  check_indices(indices, experts, op);
  MT_ROUTE(logits.device, op, moe_router_bwd(dlogits, dprobs, logits, indices, options));
}

int64_t moe_expert_capacity(int64_t tokens, int64_t experts, int64_t topk, double capacity_factor) {
  MT_CHECK(tokens >= 0 && experts > 0 && topk > 0)
      << "moe_expert_capacity: tokens " << tokens << ", experts " << experts << ", topk " << topk
      << " (expected tokens ≥ 0, the others > 0)";
  MT_CHECK(std::isfinite(capacity_factor) && capacity_factor > 0)
      << "moe_expert_capacity: --moe-expert-capacity-factor " << capacity_factor
      << " must be positive (leave it unset for dropless routing)";
  // Python's math.ceil((num_tokens / num_experts) * capacity_factor), num_tokens = T·k: the same
  // two double roundings.
  const double per_expert = static_cast<double>(tokens * topk) / static_cast<double>(experts);
  return static_cast<int64_t>(std::ceil(per_expert * capacity_factor));
}

void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, const MoeCapacityOptions& capacity) {
  const char* op = "moe_routing_map_fwd";
  const int64_t experts = check_logits(routing_probs, op, "routing_probs");
  const int64_t tokens = routing_probs.dim(0);
  check_tensor(routing_map, routing_probs.shape, DType::u8, op, "routing_map");
  check_dtype(probs, DType::f32, op, "probs");
  MT_CHECK(probs.ndim() == 2 && probs.dim(0) == tokens)
      << op << ": probs is " << probs.str() << "; expected [" << tokens << ", topk]";
  check_topk(probs.dim(1), experts, op);
  check_topk_pair(probs, indices, tokens, probs.dim(1), op, "probs");
  MT_CHECK(capacity.drop_policy == MoeDropPolicy::probs || capacity.drop_policy == MoeDropPolicy::position)
      << op << ": unknown MoeDropPolicy " << static_cast<int>(capacity.drop_policy);
  MT_CHECK(capacity.capacity_factor || !capacity.pad_to_capacity)
      << op << ": --moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor";
  int64_t cap = -1;  // dropless
  if (capacity.capacity_factor) cap = moe_expert_capacity(tokens, experts, probs.dim(1), *capacity.capacity_factor);
  check_same_device({routing_probs, routing_map, probs, indices}, op);
  check_indices(indices, experts, op);
  MT_ROUTE(probs.device, op, moe_routing_map_fwd(routing_probs, routing_map, probs, indices, cap, capacity.drop_policy, capacity.pad_to_capacity));
}

void moe_routing_map_bwd(const TensorView& dprobs, const TensorView& drouting_probs, const TensorView& routing_map,
                         const TensorView& indices) {
  const char* op = "moe_routing_map_bwd";
  const int64_t experts = check_logits(drouting_probs, op, "drouting_probs");
  const int64_t tokens = drouting_probs.dim(0);
  check_tensor(routing_map, drouting_probs.shape, DType::u8, op, "routing_map");
  check_dtype(dprobs, DType::f32, op, "dprobs");
  MT_CHECK(dprobs.ndim() == 2 && dprobs.dim(0) == tokens)
      << op << ": dprobs is " << dprobs.str() << "; expected [" << tokens << ", topk]";
  check_topk(dprobs.dim(1), experts, op);
  check_topk_pair(dprobs, indices, tokens, dprobs.dim(1), op, "dprobs");
  check_same_device({dprobs, drouting_probs, routing_map, indices}, op);
  check_indices(indices, experts, op);
  MT_ROUTE(dprobs.device, op, moe_routing_map_bwd(dprobs, drouting_probs, routing_map, indices));
}

void moe_tokens_per_expert(const TensorView& counts, const TensorView& routing_map) {
  const char* op = "moe_tokens_per_expert";
  check_dtype(routing_map, DType::u8, op, "routing_map");
  MT_CHECK(routing_map.ndim() == 2) << op << ": routing_map is " << routing_map.str() << "; expected [tokens, experts]";
  check_tensor(routing_map, routing_map.shape, DType::u8, op, "routing_map");
  check_tensor(counts, {routing_map.dim(1)}, DType::f32, op, "counts");
  check_same_device({counts, routing_map}, op);
  MT_ROUTE(counts.device, op, moe_tokens_per_expert(counts, routing_map));
}

void moe_aux_scores_fwd(const TensorView& scores, const TensorView& counts, const TensorView& logits, int64_t topk,
                        MoeScoreFunction score_function) {
  const char* op = "moe_aux_scores_fwd";
  const int64_t experts = check_logits(logits, op);
  check_topk(topk, experts, op);
  check_score_function(score_function, op);
  check_tensor(scores, logits.shape, DType::f32, op, "scores");
  check_counts(counts, logits.dim(0), experts, op);
  check_same_device({scores, counts, logits}, op);
  MT_ROUTE(logits.device, op, moe_aux_scores_fwd(scores, counts, logits, topk, score_function));
}

void moe_aux_scores_bwd(const TensorView& dlogits, const TensorView& dscores, const TensorView& logits,
                        MoeScoreFunction score_function) {
  const char* op = "moe_aux_scores_bwd";
  check_logits(logits, op);
  check_score_function(score_function, op);
  check_tensor(dlogits, logits.shape, DType::f32, op, "dlogits");
  check_tensor(dscores, logits.shape, DType::f32, op, "dscores");
  check_same_device({dlogits, dscores, logits}, op);
  MT_ROUTE(logits.device, op, moe_aux_scores_bwd(dlogits, dscores, logits, score_function));
}

void moe_aux_loss_fwd(const TensorView& loss, const TensorView& scores, const TensorView& counts,
                      int64_t total_tokens, int64_t topk, double coeff) {
  const char* op = "moe_aux_loss_fwd";
  const int64_t experts = check_logits(scores, op, "scores");
  check_counts(counts, scores.dim(0), experts, op);
  check_scalar_args(total_tokens, topk, coeff, op);
  check_tensor(loss, {1}, DType::f32, op, "loss");
  check_same_device({loss, scores, counts}, op);
  MT_ROUTE(scores.device, op, moe_aux_loss_fwd(loss, scores, counts, total_tokens, topk, coeff));
}

void moe_aux_loss_bwd(const TensorView& dscores, float dloss, const TensorView& counts, int64_t total_tokens,
                      int64_t topk, double coeff) {
  const char* op = "moe_aux_loss_bwd";
  const int64_t experts = check_logits(dscores, op, "dscores");
  check_counts(counts, dscores.dim(0), experts, op);
  check_scalar_args(total_tokens, topk, coeff, op);
  check_same_device({dscores, counts}, op);
  MT_ROUTE(dscores.device, op, moe_aux_loss_bwd(dscores, dloss, counts, total_tokens, topk, coeff));
}

void moe_z_loss_fwd(const TensorView& loss, const TensorView& logits, double coeff) {
  const char* op = "moe_z_loss_fwd";
  check_logits(logits, op);
  check_tensor(loss, {1}, DType::f32, op, "loss");
  MT_CHECK(std::isfinite(coeff)) << op << ": --moe-z-loss-coeff " << coeff << " is not finite";
  check_same_device({loss, logits}, op);
  MT_ROUTE(logits.device, op, moe_z_loss_fwd(loss, logits, coeff));
}

void moe_z_loss_bwd(const TensorView& dlogits, float dloss, const TensorView& logits, double coeff) {
  const char* op = "moe_z_loss_bwd";
  check_logits(logits, op);
  check_tensor(dlogits, logits.shape, DType::f32, op, "dlogits");
  MT_CHECK(std::isfinite(coeff)) << op << ": --moe-z-loss-coeff " << coeff << " is not finite";
  check_same_device({dlogits, logits}, op);
  MT_ROUTE(logits.device, op, moe_z_loss_bwd(dlogits, dloss, logits, coeff));
}

void moe_expert_bias_update(const TensorView& expert_bias, const TensorView& tokens_per_expert, float rate) {
  const char* op = "moe_expert_bias_update";
  check_dtype(expert_bias, DType::f32, op, "expert_bias");
  MT_CHECK(expert_bias.ndim() >= 1 && expert_bias.dim(-1) > 0)
      << op << ": expert_bias is " << expert_bias.str() << "; expected [..., experts]";
  check_tensor(expert_bias, expert_bias.shape, DType::f32, op, "expert_bias");
  check_tensor(tokens_per_expert, expert_bias.shape, DType::f32, op, "tokens_per_expert");
  MT_CHECK(std::isfinite(rate)) << op << ": --moe-router-bias-update-rate " << rate << " is not finite";
  check_same_device({expert_bias, tokens_per_expert}, op);
  MT_ROUTE(expert_bias.device, op, moe_expert_bias_update(expert_bias, tokens_per_expert, rate));
}

}  // namespace mt
