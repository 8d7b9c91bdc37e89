// CPU kernels for the MoE router's losses (load balancing, z-loss) and the expert-bias update.
// Per-row math in double (backend/math/moe_router_math.h, shared with the CUDA kernels); the
// scalar losses are reduced serially in token order, so they do not
// depend on the thread count (they are small next to the expert GEMMs).
#include "backend/cpu/moe_router.h"

#include <algorithm>
#include <cmath>

namespace mt::cpu {

void moe_aux_scores_fwd(const TensorView& scores, const TensorView& counts, const TensorView& logits, int64_t topk,
                        MoeScoreFunction score_function) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1), seqs = counts.dim(0);
  const float* x = logits.f32();
  float* s = scores.f32();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    double row[kMoeMaxExperts], sig[kMoeMaxExperts];
    moe_aux_scores_row(x + t * experts, experts, score_function, row, sig);
    for (int64_t e = 0; e < experts; ++e) s[t * experts + e] = static_cast<float>(row[e]);
  }
  // The losses' own top-k, over the f32 scores as Megatron takes it; counts stay exact in f32 up to 2^24.
  float* c = counts.f32();
  std::fill(c, c + seqs * experts, 0.0f);
  for (int64_t t = 0; t < rows; ++t) {
    bool allowed[kMoeMaxExperts];
    int32_t picked[kMoeMaxExperts];
    std::fill(allowed, allowed + experts, true);
    moe_select_topk(s + t * experts, allowed, experts, topk, picked);
    for (int64_t j = 0; j < topk; ++j) c[(t % seqs) * experts + picked[j]] += 1.0f;
  }
}

void moe_aux_scores_bwd(const TensorView& dlogits, const TensorView& dscores, const TensorView& logits,
                        MoeScoreFunction score_function) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1);
  const float* x = logits.f32();
  const float* ds_all = dscores.f32();
  float* dx_all = dlogits.f32();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    double s[kMoeMaxExperts], sig[kMoeMaxExperts];
    moe_aux_scores_row_bwd(dx_all + t * experts, ds_all + t * experts, x + t * experts, experts, score_function, s,
                           sig);
  }
}

void moe_aux_loss_fwd(const TensorView& loss, const TensorView& scores, const TensorView& counts,
                      int64_t total_tokens, int64_t topk, double coeff) {
  const int64_t rows = scores.dim(0), experts = scores.dim(1), seqs = counts.dim(0);
  const float* s = scores.f32();
  const float* c = counts.f32();
  double sum = 0.0;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < experts; ++e) sum += static_cast<double>(s[t * experts + e]) * c[(t % seqs) * experts + e];
  loss.f32()[0] = static_cast<float>(sum * moe_aux_loss_factor(experts, seqs, total_tokens, topk, coeff));
}

void moe_aux_loss_bwd(const TensorView& dscores, float dloss, const TensorView& counts, int64_t total_tokens,
                      int64_t topk, double coeff) {
  const int64_t rows = dscores.dim(0), experts = dscores.dim(1), seqs = counts.dim(0);
  const double factor = dloss * moe_aux_loss_factor(experts, seqs, total_tokens, topk, coeff);
  const float* c = counts.f32();
  float* ds = dscores.f32();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t e = 0; e < experts; ++e)
      ds[t * experts + e] += static_cast<float>(factor * c[(t % seqs) * experts + e]);
}

void moe_z_loss_fwd(const TensorView& loss, const TensorView& logits, double coeff) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1);
  const float* x = logits.f32();
  double sum = 0.0;
  for (int64_t t = 0; t < rows; ++t) {
    const double lse = moe_logsumexp_row(x + t * experts, experts, nullptr);
    sum += lse * lse;
  }
  loss.f32()[0] = rows > 0 ? static_cast<float>(coeff * sum / static_cast<double>(rows)) : 0.0f;
}

void moe_z_loss_bwd(const TensorView& dlogits, float dloss, const TensorView& logits, double coeff) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1);
  const float* x = logits.f32();
  float* dx = dlogits.f32();
  const double factor = rows > 0 ? 2.0 * dloss * coeff / static_cast<double>(rows) : 0.0;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    double soft[kMoeMaxExperts];
    const double lse = moe_logsumexp_row(x + t * experts, experts, soft);
    for (int64_t e = 0; e < experts; ++e) dx[t * experts + e] += static_cast<float>(factor * lse * soft[e]);
  }
}

void moe_expert_bias_update(const TensorView& expert_bias, const TensorView& tokens_per_expert, float rate) {
  const int64_t experts = expert_bias.dim(-1), rows = expert_bias.numel() / experts;
  float* bias = expert_bias.f32();
  const float* counts = tokens_per_expert.f32();
  for (int64_t r = 0; r < rows; ++r) moe_expert_bias_row(bias + r * experts, counts + r * experts, experts, rate);
}

}  // namespace mt::cpu
