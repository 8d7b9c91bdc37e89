// CPU kernels for ops/moe_router.h (shapes and options already validated by the op; index values
// checked here). Routing and capacity live in moe_router.cpp, Sinkhorn's normalisation in
// moe_sinkhorn.cpp, the losses and the bias update in moe_router_losses.cpp.
#pragma once

#include <cstdint>

#include "backend/math/moe_router_math.h"
#include "backend/moe_router_args.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const TensorView& sinkhorn_scores, const MoeRouterOptions& options);
void moe_sinkhorn_fwd(const TensorView& scores, const TensorView& logits);  // in moe_sinkhorn.cpp
void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& options);

// capacity < 0: dropless.
void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, int64_t capacity, MoeDropPolicy policy, bool pad_to_capacity);
void moe_routing_map_bwd(const TensorView& dprobs, const TensorView& drouting_probs, const TensorView& routing_map,
                         const TensorView& indices);
void moe_tokens_per_expert(const TensorView& counts, const TensorView& routing_map);

void moe_aux_scores_fwd(const TensorView& scores, const TensorView& counts, const TensorView& logits, int64_t topk,
                        MoeScoreFunction score_function);
void moe_aux_scores_bwd(const TensorView& dlogits, const TensorView& dscores, const TensorView& logits,
                        MoeScoreFunction score_function);
void moe_aux_loss_fwd(const TensorView& loss, const TensorView& scores, const TensorView& counts,
                      int64_t total_tokens, int64_t topk, double coeff);
void moe_aux_loss_bwd(const TensorView& dscores, float dloss, const TensorView& counts, int64_t total_tokens,
                      int64_t topk, double coeff);
void moe_z_loss_fwd(const TensorView& loss, const TensorView& logits, double coeff);
void moe_z_loss_bwd(const TensorView& dlogits, float dloss, const TensorView& logits, double coeff);
void moe_expert_bias_update(const TensorView& expert_bias, const TensorView& tokens_per_expert, float rate);

// The per-row arithmetic (moe_select_topk, the softmax rows, one token's routing) is
// backend/math/moe_router_math.h's, shared with the CUDA kernels.

}  // namespace mt::cpu
