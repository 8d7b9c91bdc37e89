// Placeholders for the moe router ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const MoeRouterOptions& options) {
  MT_FAIL() << "moe_router_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& options) {
  MT_FAIL() << "moe_router_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, int64_t capacity, MoeDropPolicy policy, bool pad_to_capacity) {
  MT_FAIL() << "moe_routing_map_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_routing_map_bwd(const TensorView& dprobs, const TensorView& drouting_probs, const TensorView& routing_map,
                         const TensorView& indices) {
  MT_FAIL() << "moe_routing_map_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_tokens_per_expert(const TensorView& counts, const TensorView& routing_map) {
  MT_FAIL() << "moe_tokens_per_expert: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_aux_scores_fwd(const TensorView& scores, const TensorView& counts, const TensorView& logits, int64_t topk,
                        MoeScoreFunction score_function) {
  MT_FAIL() << "moe_aux_scores_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_aux_scores_bwd(const TensorView& dlogits, const TensorView& dscores, const TensorView& logits,
                        MoeScoreFunction score_function) {
  MT_FAIL() << "moe_aux_scores_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_aux_loss_fwd(const TensorView& loss, const TensorView& scores, const TensorView& counts,
                      int64_t total_tokens, int64_t topk, double coeff) {
  MT_FAIL() << "moe_aux_loss_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_aux_loss_bwd(const TensorView& dscores, float dloss, const TensorView& counts, int64_t total_tokens,
                      int64_t topk, double coeff) {
  MT_FAIL() << "moe_aux_loss_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_z_loss_fwd(const TensorView& loss, const TensorView& logits, double coeff) {
  MT_FAIL() << "moe_z_loss_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_z_loss_bwd(const TensorView& dlogits, float dloss, const TensorView& logits, double coeff) {
  MT_FAIL() << "moe_z_loss_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_expert_bias_update(const TensorView& expert_bias, const TensorView& tokens_per_expert, float rate) {
  MT_FAIL() << "moe_expert_bias_update: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
