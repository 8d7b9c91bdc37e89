// Owns the argument types of the MoE router kernels (MoeRouterOptions, MoeCapacityOptions), shared
// by ops/moe_router.h (the op contracts) and every backend's kernels; they live here because
// backends sit below ops. Field comments name the Megatron flag each one mirrors.
#pragma once

#include <cstdint>
#include <optional>

namespace mt {

// Per-row kernels keep their per-expert scratch on the stack, so the expert count is bounded
// (DeepSeek-V3 routes over 256, Kimi-K2 over 384).
inline constexpr int64_t kMoeMaxExperts = 1024;

enum class MoeScoreFunction : uint8_t { softmax, sigmoid };  // --moe-router-score-function
enum class MoeDropPolicy : uint8_t { probs, position };      // --moe-token-drop-policy

struct MoeRouterOptions {
  int64_t topk = 2;                                           // --moe-router-topk
  MoeScoreFunction score_function = MoeScoreFunction::softmax;
  bool pre_softmax = false;                                   // --moe-router-pre-softmax (softmax only)
  int64_t num_groups = 0;                                     // --moe-router-num-groups; 0: not group-limited
  int64_t group_topk = 0;                                     // --moe-router-group-topk
  float scaling_factor = 0.0f;                                // --moe-router-topk-scaling-factor; 0: unset
  // --moe-router-load-balancing-type sinkhorn: weights σ (topk 1) or softmax (topk > 1) of the
  // chosen experts; the choice balanced by moe_sinkhorn_fwd in training. The score function,
  // pre-softmax, groups, bias and scaling must stay unset.
  bool sinkhorn = false;
};

struct MoeCapacityOptions {
  std::optional<double> capacity_factor;                      // --moe-expert-capacity-factor; unset: dropless
  MoeDropPolicy drop_policy = MoeDropPolicy::probs;
  bool pad_to_capacity = false;                               // --moe-pad-expert-input-to-capacity
};

}  // namespace mt
