// C-style launchers of the MoE router kernels (backend/cuda/moe_router.cpp calls them): raw device
// pointers, sizes, the options and the stream. Implemented in moe_router.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/moe_router_args.h"

namespace mt::cuda::k {

// Per-token routing and its backward (backend/math/moe_router_math.h per row); bias and select
// (Sinkhorn's scores [rows, experts]) may be null.
void moe_router_fwd(float* probs, int32_t* indices, const float* logits, const float* bias, const float* select,
                    int64_t rows, int64_t experts, const MoeRouterOptions& o, cudaStream_t s);
// Sinkhorn's normalisation of logits [rows, experts] into scores (backend/math/moe_sinkhorn_math.h),
// in moe_sinkhorn.cu; scores must not alias logits.
void moe_sinkhorn_fwd(float* scores, const float* logits, int64_t rows, int64_t experts, cudaStream_t s);
void moe_router_bwd(float* dlogits, const float* dprobs, const float* logits, const int32_t* indices, int64_t rows,
                    int64_t experts, const MoeRouterOptions& o, cudaStream_t s);

// Dense routing with capacity (< 0: dropless); policy 0 probs, 1 position. experts ≤ kMoeMaxExperts.
void moe_routing_map_fwd(float* routing_probs, uint8_t* routing_map, const float* probs, const int32_t* indices,
                         int64_t rows, int64_t topk, int64_t experts, int64_t capacity, MoeDropPolicy policy,
                         bool pad_to_capacity, cudaStream_t s);
void moe_routing_map_bwd(float* dprobs, const float* drouting_probs, const uint8_t* routing_map,
                         const int32_t* indices, int64_t rows, int64_t topk, int64_t experts, cudaStream_t s);
void moe_tokens_per_expert(float* counts, const uint8_t* routing_map, int64_t rows, int64_t experts, cudaStream_t s);

void moe_aux_scores_fwd(float* scores, float* counts, const float* logits, int64_t rows, int64_t experts,
                        int64_t seqs, int64_t topk, MoeScoreFunction f, cudaStream_t s);
void moe_aux_scores_bwd(float* dlogits, const float* dscores, const float* logits, int64_t rows, int64_t experts,
                        MoeScoreFunction f, cudaStream_t s);
// loss[0] = float(Σ_t Σ_e scores[t, e] · counts[t mod seqs, e] · factor), the sum in double.
void moe_aux_loss_fwd(float* loss, const float* scores, const float* counts, int64_t rows, int64_t experts,
                      int64_t seqs, double factor, cudaStream_t s);
// dscores[t, e] += float(factor · counts[t mod seqs, e]).
void moe_aux_loss_bwd(float* dscores, const float* counts, int64_t rows, int64_t experts, int64_t seqs,
                      double factor, cudaStream_t s);
// loss[0] = float(coeff · Σ_t lse_t² / rows) (0 without rows); partial: kZLossBlocks doubles.
constexpr int kZLossBlocks = 256;
void moe_z_loss_fwd(float* loss, double* partial, const float* logits, int64_t rows, int64_t experts, double coeff,
                    cudaStream_t s);
// dlogits[t, e] += float(factor · lse_t · softmax(logits[t])_e).
void moe_z_loss_bwd(float* dlogits, const float* logits, int64_t rows, int64_t experts, double factor,
                    cudaStream_t s);
void moe_expert_bias_update(float* bias, const float* counts, int64_t rows, int64_t experts, float rate,
                            cudaStream_t s);

}  // namespace mt::cuda::k
