// CPU kernels for MoE routing and capacity. Routing works token by token (rows are independent,
// one OpenMP team over them; the row's arithmetic is backend/math/moe_router_math.h's, which the
// CUDA kernels share) with per-expert scratch on the stack: selection compares the f32
// values Megatron compares (softmax, logits, or σ + bias, each rounded to f32), while the weights
// and gradients are computed in double and rounded once. Capacity is one serial radix select per
// expert over the top-k lists, so it never sorts a [T] column.
#include "backend/cpu/moe_router.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace mt::cpu {

void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const TensorView& sinkhorn_scores, const MoeRouterOptions& o) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1), k = o.topk;
  const float* x_all = logits.f32();
  const float* bias = expert_bias.empty() ? nullptr : expert_bias.f32();
  const float* select = sinkhorn_scores.empty() ? nullptr : sinkhorn_scores.f32();
  float* p_all = probs.f32();
  int32_t* idx_all = indices.i32();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    double score[kMoeMaxExperts];
    float sel[kMoeMaxExperts], group_score[kMoeMaxExperts];
    bool allowed[kMoeMaxExperts], group_open[kMoeMaxExperts], in_group[kMoeMaxExperts];
    int32_t picked[kMoeMaxExperts];
    const MoeRouteScratch s{score, sel, allowed, group_score, group_open, in_group, picked};
    moe_route_row(x_all + t * experts, experts, bias, select ? select + t * experts : nullptr, o, p_all + t * k,
                  idx_all + t * k, s);
  }
}

void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& o) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1), k = o.topk;
  const float* x_all = logits.f32();
  const float* dp_all = dprobs.f32();
  const int32_t* idx_all = indices.i32();
  float* dx_all = dlogits.f32();
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    double g[kMoeMaxExperts], sm[kMoeMaxExperts], ds[kMoeMaxExperts], q[kMoeMaxExperts];
    const MoeRouteBwdScratch w{g, sm, ds, q};
    moe_route_row_bwd(dx_all + t * experts, dp_all + t * k, x_all + t * experts, idx_all + t * k, experts, o, w);
  }
}

void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, int64_t capacity, MoeDropPolicy policy, bool pad_to_capacity) {
  const int64_t rows = probs.dim(0), k = probs.dim(1), experts = routing_probs.dim(1);
  const float* p = probs.f32();
  const int32_t* idx = indices.i32();
  float* rp = routing_probs.f32();
  uint8_t* map = routing_map.u8();
  // The dense scatter: every choice, with its weight (the dropless result).
  std::fill(rp, rp + rows * experts, 0.0f);
  std::memset(map, 0, static_cast<size_t>(rows * experts));
  for (int64_t i = 0; i < rows * k; ++i) {
    const int64_t t = i / k;
    rp[t * experts + idx[i]] = p[i];
    map[t * experts + idx[i]] = 1;
  }
  if (capacity < 0) return;
  if (capacity >= rows) {  // every token fits: keep all (and with padding, every slot)
    if (pad_to_capacity) std::memset(map, 1, static_cast<size_t>(rows * experts));
    return;
  }
  // Each expert keeps the `capacity` best (token, expert) entries of its column by key (the weight,
  // or 1 for chosen / 0 for not under the position policy), ties to the lower token. The column is
  // sparse: its unchosen entries all have the key of 0, so counts need only the top-k lists.
  auto key_of = [&](int64_t i) { return moe_order_key(policy == MoeDropPolicy::probs ? p[i] : 1.0f); };
  const uint32_t zero_key = moe_order_key(0.0f);
  int64_t chosen[kMoeMaxExperts] = {}, count[kMoeMaxExperts];
  uint32_t prefix[kMoeMaxExperts] = {};
  for (int64_t i = 0; i < rows * k; ++i) ++chosen[idx[i]];
  // Radix select: after the loop prefix[e] is the largest key with at least `capacity` entries ≥ it,
  // i.e. the capacity-th largest key of the column.
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t b = 1u << bit;
    for (int64_t e = 0; e < experts; ++e) count[e] = zero_key >= (prefix[e] | b) ? rows - chosen[e] : 0;
    for (int64_t i = 0; i < rows * k; ++i)
      if (key_of(i) >= (prefix[idx[i]] | b)) ++count[idx[i]];
    for (int64_t e = 0; e < experts; ++e)
      if (count[e] >= capacity) prefix[e] |= b;
  }
  // Entries above the threshold are all kept; of those equal to it, the first ones by token index.
  int64_t ties_left[kMoeMaxExperts];
  for (int64_t e = 0; e < experts; ++e) ties_left[e] = capacity - (zero_key > prefix[e] ? rows - chosen[e] : 0);
  for (int64_t i = 0; i < rows * k; ++i)
    if (key_of(i) > prefix[idx[i]]) --ties_left[idx[i]];
  for (int64_t t = 0; t < rows; ++t) {
    uint32_t key[kMoeMaxExperts];
    for (int64_t e = 0; e < experts; ++e) key[e] = zero_key;
    for (int64_t j = 0; j < k; ++j) key[idx[t * k + j]] = key_of(t * k + j);
    for (int64_t e = 0; e < experts; ++e) {
      const bool kept = key[e] > prefix[e] || (key[e] == prefix[e] && ties_left[e]-- > 0);
      const int64_t at = t * experts + e;
      map[at] = pad_to_capacity ? kept : (kept && map[at]);
      if (!map[at]) rp[at] = 0.0f;
    }
  }
}

void moe_routing_map_bwd(const TensorView& dprobs, const TensorView& drouting_probs, const TensorView& routing_map,
                         const TensorView& indices) {
  const int64_t rows = dprobs.dim(0), k = dprobs.dim(1), experts = drouting_probs.dim(1);
  const float* drp = drouting_probs.f32();
  const uint8_t* map = routing_map.u8();
  const int32_t* idx = indices.i32();
  float* dp = dprobs.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < rows * k; ++i) {
    const int64_t at = (i / k) * experts + idx[i];
    if (map[at]) dp[i] += drp[at];
  }
}

void moe_tokens_per_expert(const TensorView& counts, const TensorView& routing_map) {
  const int64_t rows = routing_map.dim(0), experts = routing_map.dim(1);
  const uint8_t* map = routing_map.u8();
  float* out = counts.f32();
  for (int64_t e = 0; e < experts; ++e) {
    int64_t n = 0;
    for (int64_t t = 0; t < rows; ++t) n += map[t * experts + e] != 0;
    out[e] += static_cast<float>(n);
  }
}

}  // namespace mt::cpu
