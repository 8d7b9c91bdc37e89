// Owns the CUDA kernels' op-level entry points: the same names and arguments as the CPU backend's
// (backend/cpu/*.h), so ops/dispatch.h routes to either; shapes are validated by the op before.
// Plain C++ declarations: no CUDA header reaches the ops that include this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backend/activation_args.h"
#include "backend/adamw_args.h"
#include "backend/attention_args.h"
#include "backend/dropout_args.h"
#include "backend/moe_experts_args.h"
#include "backend/moe_router_args.h"
#include "base/rng.h"
#include "tensor/tensor.h"

namespace mt::cuda {


// elementwise
void add_fwd(const TensorView& out, const TensorView& a, const TensorView& b);
void accumulate(const TensorView& dst, const TensorView& src);
void bias_add(const TensorView& t, const TensorView& bias);
void scale_inplace(const TensorView& t, float factor);
void copy_tensor(const TensorView& dst, const TensorView& src);
void copy_row_block(const TensorView& dst, int64_t dst_row, const TensorView& src, int64_t src_row, int64_t rows);
void cast(const TensorView& dst, const TensorView& src);
void round_to_dtype(const TensorView& t, DType dtype);
double sum_squares(const TensorView& t);
int64_t sum_squares_chunks(int64_t n);

// activation
void pointwise_activation_fwd(const TensorView& out, const TensorView& inp, PointwiseActivation act);
void pointwise_activation_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, PointwiseActivation act);
void swiglu_fwd(const TensorView& out, const TensorView& inp);
void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp);

// dropout
void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 const DropoutRows& rows);
void dropout_mask(const TensorView& mask, float p, const RngStream& rng, const DropoutRows& rows);
void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p);
void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, const DropoutRows& rows);

// linear
void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias);
void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight);

// norm
void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps, float weight_offset);
void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd, float weight_offset);
void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps, float weight_offset);
void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd, float weight_offset);

// embedding
void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, int64_t vocab_start, int64_t vocab_total);
void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, int64_t vocab_start,
                   int64_t vocab_total);

// cross_entropy
void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels);
void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels);
void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits);
void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start);
void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target);
void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start);

// adamw
void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy);
void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params);
double unscaled_sum_squares(const TensorView& grad, float unscale);
void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double> scratch,
                                std::span<double> sums);

// attention
void rope_tables(const TensorView& cos, const TensorView& sin, double base, int64_t rotary_dim);
void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form);
void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form);
void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options);
void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace);
void attention_merge(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part);
void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options);
void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace);
size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads);
void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions);
void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale);

// moe_experts
int64_t moe_permuted_rows(const TensorView& routing_map);
void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map);
void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token);
void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs);
void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs);
void moe_grouped_mlp_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act,
                         const TensorView& inp, const int32_t* counts, const TensorView& weight1,
                         const TensorView& weight2, const MoeExpertsOptions& options);
void moe_grouped_mlp_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                         const TensorView& dout, const TensorView& inp, const TensorView& pre_act, const int32_t* counts,
                         const TensorView& weight1, const TensorView& weight2, const TensorView& act,
                         const TensorView& dact, const TensorView& dpre_act, const MoeExpertsOptions& options);

// moe_router
void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const TensorView& sinkhorn_scores, const MoeRouterOptions& options);
void moe_sinkhorn_fwd(const TensorView& scores, const TensorView& logits);
void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& options);
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

}  // namespace mt::cuda
