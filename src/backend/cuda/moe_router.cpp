// CUDA entry points of ops/moe_router.h: views to pointers, then the kernels of moe_router.cu. The
// loss factors are computed here on the host with the function the CPU kernels use.
#include "backend/cuda/kernels/moe_router.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"
#include "backend/math/moe_router_math.h"

namespace mt::cuda {

void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const TensorView& sinkhorn_scores, const MoeRouterOptions& options) {
  k::moe_router_fwd(probs.f32(), indices.i32(), logits.f32(), expert_bias.empty() ? nullptr : expert_bias.f32(),
                    sinkhorn_scores.empty() ? nullptr : sinkhorn_scores.f32(), logits.dim(0), logits.dim(1), options,
                    stream());
  check_launch("moe_router_fwd");
}

void moe_sinkhorn_fwd(const TensorView& scores, const TensorView& logits) {
  k::moe_sinkhorn_fwd(scores.f32(), logits.f32(), logits.dim(0), logits.dim(1), stream());
  check_launch("moe_sinkhorn_fwd");
}

void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& options) {
  k::moe_router_bwd(dlogits.f32(), dprobs.f32(), logits.f32(), indices.i32(), logits.dim(0), logits.dim(1), options,
                    stream());
  check_launch("moe_router_bwd");
}

void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, int64_t capacity, MoeDropPolicy policy, bool pad_to_capacity) {
  k::moe_routing_map_fwd(routing_probs.f32(), routing_map.u8(), probs.f32(), indices.i32(), probs.dim(0),
                         probs.dim(1), routing_probs.dim(1), capacity, policy, pad_to_capacity, stream());
  check_launch("moe_routing_map_fwd");
}

void moe_routing_map_bwd(const TensorView& dprobs, const TensorView& drouting_probs, const TensorView& routing_map,
                         const TensorView& indices) {
  k::moe_routing_map_bwd(dprobs.f32(), drouting_probs.f32(), routing_map.u8(), indices.i32(), dprobs.dim(0),
                         dprobs.dim(1), drouting_probs.dim(1), stream());
  check_launch("moe_routing_map_bwd");
}

void moe_tokens_per_expert(const TensorView& counts, const TensorView& routing_map) {
  k::moe_tokens_per_expert(counts.f32(), routing_map.u8(), routing_map.dim(0), routing_map.dim(1), stream());
  check_launch("moe_tokens_per_expert");
}

void moe_aux_scores_fwd(const TensorView& scores, const TensorView& counts, const TensorView& logits, int64_t topk,
                        MoeScoreFunction score_function) {
  k::moe_aux_scores_fwd(scores.f32(), counts.f32(), logits.f32(), logits.dim(0), logits.dim(1), counts.dim(0), topk,
                        score_function, stream());
  check_launch("moe_aux_scores_fwd");
}

void moe_aux_scores_bwd(const TensorView& dlogits, const TensorView& dscores, const TensorView& logits,
                        MoeScoreFunction score_function) {
  k::moe_aux_scores_bwd(dlogits.f32(), dscores.f32(), logits.f32(), logits.dim(0), logits.dim(1), score_function,
                        stream());
  check_launch("moe_aux_scores_bwd");
}

void moe_aux_loss_fwd(const TensorView& loss, const TensorView& scores, const TensorView& counts,
                      int64_t total_tokens, int64_t topk, double coeff) {
  const int64_t experts = scores.dim(1), seqs = counts.dim(0);
  k::moe_aux_loss_fwd(loss.f32(), scores.f32(), counts.f32(), scores.dim(0), experts, seqs,
                      moe_aux_loss_factor(experts, seqs, total_tokens, topk, coeff), stream());
  check_launch("moe_aux_loss_fwd");
}

void moe_aux_loss_bwd(const TensorView& dscores, float dloss, const TensorView& counts, int64_t total_tokens,
                      int64_t topk, double coeff) {
  const int64_t experts = dscores.dim(1), seqs = counts.dim(0);
  const double factor = dloss * moe_aux_loss_factor(experts, seqs, total_tokens, topk, coeff);
  k::moe_aux_loss_bwd(dscores.f32(), counts.f32(), dscores.dim(0), experts, seqs, factor, stream());
  check_launch("moe_aux_loss_bwd");
}

void moe_z_loss_fwd(const TensorView& loss, const TensorView& logits, double coeff) {
  k::moe_z_loss_fwd(loss.f32(), reduction_scratch(), logits.f32(), logits.dim(0), logits.dim(1), coeff, stream());
  check_launch("moe_z_loss_fwd");
}

void moe_z_loss_bwd(const TensorView& dlogits, float dloss, const TensorView& logits, double coeff) {
  const int64_t rows = logits.dim(0);
  const double factor = rows > 0 ? 2.0 * dloss * coeff / static_cast<double>(rows) : 0.0;
  k::moe_z_loss_bwd(dlogits.f32(), logits.f32(), rows, logits.dim(1), factor, stream());
  check_launch("moe_z_loss_bwd");
}

void moe_expert_bias_update(const TensorView& expert_bias, const TensorView& tokens_per_expert, float rate) {
  const int64_t experts = expert_bias.dim(-1);
  k::moe_expert_bias_update(expert_bias.f32(), tokens_per_expert.f32(), expert_bias.numel() / experts, experts, rate,
                            stream());
  check_launch("moe_expert_bias_update");
}

}  // namespace mt::cuda
