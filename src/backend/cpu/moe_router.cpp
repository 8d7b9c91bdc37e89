// CPU kernels for MoE routing and capacity. Routing works token by token (rows are independent,
// one OpenMP team over them) with per-expert scratch on the stack: selection compares the f32
// values Megatron compares (softmax, logits, or σ + bias, each rounded to f32), while the weights
// and gradients are computed in double and rounded once. Capacity is one serial radix select per
// expert over the top-k lists, so it never sorts a [T] column.
#include "backend/cpu/moe_router.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace mt::cpu {

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// out[e] = softmax(x)[e] in double.
void softmax_row(const float* x, int64_t n, double* out) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < n; ++e) mx = std::max(mx, static_cast<double>(x[e]));
  for (int64_t e = 0; e < n; ++e) sum += out[e] = std::exp(x[e] - mx);
  for (int64_t e = 0; e < n; ++e) out[e] /= sum;
}

// Every index in [0, E) and no expert twice in a row (the kernels would silently double-count).
void check_indices(const TensorView& indices, int64_t experts, const char* op) {
  const int64_t rows = indices.dim(0), k = indices.dim(1);
  const int32_t* idx = indices.i32();
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = idx[t * k + j];
      if (e < 0 || e >= experts)
        MT_FAIL() << op << ": indices[" << t << ", " << j << "] = " << e << " is out of range [0, " << experts << ")";
      for (int64_t l = 0; l < j; ++l)
        if (idx[t * k + l] == e) MT_FAIL() << op << ": token " << t << " lists expert " << e << " twice";
    }
}

// Group-limited routing: leaves allowed[e] set only for the experts of the group_topk groups whose
// top-(topk/group_topk) selection values sum highest (ties to the lower group).
void limit_to_groups(const float* sel, bool* allowed, int64_t experts, const MoeRouterOptions& o) {
  const int64_t size = experts / o.num_groups, per_group = o.topk / o.group_topk;
  float group_score[kMoeMaxExperts];
  bool group_open[kMoeMaxExperts];
  int32_t picked[kMoeMaxExperts];
  for (int64_t g = 0; g < o.num_groups; ++g) {
    bool in_group[kMoeMaxExperts];
    std::fill(in_group, in_group + size, true);
    moe_select_topk(sel + g * size, in_group, size, per_group, picked);
    double sum = 0.0;
    for (int64_t j = 0; j < per_group; ++j) sum += sel[g * size + picked[j]];
    group_score[g] = static_cast<float>(sum);
    group_open[g] = true;
  }
  moe_select_topk(group_score, group_open, o.num_groups, o.group_topk, picked);
  // moe_select_topk cleared the flags of the chosen groups: closed now means chosen.
  for (int64_t e = 0; e < experts; ++e) allowed[e] = !group_open[e / size];
}

}  // namespace

void moe_router_fwd(const TensorView& probs, const TensorView& indices, const TensorView& logits,
                    const TensorView& expert_bias, const MoeRouterOptions& o) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1), k = o.topk;
  const float* x_all = logits.f32();
  const float* bias = expert_bias.empty() ? nullptr : expert_bias.f32();
  float* p_all = probs.f32();
  int32_t* idx_all = indices.i32();
  const bool softmax = o.score_function == MoeScoreFunction::softmax;
  const double scale = o.scaling_factor != 0.0f ? o.scaling_factor : 1.0;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = x_all + t * experts;
    float* p = p_all + t * k;
    int32_t* c = idx_all + t * k;
    double score[kMoeMaxExperts];  // the unbiased score (softmax or σ) in double; unused for post-softmax
    float sel[kMoeMaxExperts];     // what the top-k compares
    bool allowed[kMoeMaxExperts];
    if (softmax && o.pre_softmax) softmax_row(x, experts, score);
    for (int64_t e = 0; e < experts; ++e) {
      if (!softmax) score[e] = sigmoid(x[e]);
      if (softmax)
        sel[e] = o.pre_softmax ? static_cast<float>(score[e]) : x[e];
      else
        sel[e] = bias ? static_cast<float>(score[e]) + bias[e] : static_cast<float>(score[e]);
      allowed[e] = true;
    }
    if (o.num_groups > 0) limit_to_groups(sel, allowed, experts, o);
    moe_select_topk(sel, allowed, experts, k, c);
    if (softmax && !o.pre_softmax) {
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, static_cast<double>(x[c[j]]));
      for (int64_t j = 0; j < k; ++j) sum += std::exp(x[c[j]] - mx);
      for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(scale * std::exp(x[c[j]] - mx) / sum);
    } else if (!softmax && k > 1) {
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) sum += score[c[j]];
      for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(scale * score[c[j]] / (sum + 1e-20));
    } else {
      for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(scale * score[c[j]]);
    }
  }
}

void moe_router_bwd(const TensorView& dlogits, const TensorView& dprobs, const TensorView& logits,
                    const TensorView& indices, const MoeRouterOptions& o) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1), k = o.topk;
  check_indices(indices, experts, "moe_router_bwd");
  const float* x_all = logits.f32();
  const float* dp_all = dprobs.f32();
  const int32_t* idx_all = indices.i32();
  float* dx_all = dlogits.f32();
  const bool softmax = o.score_function == MoeScoreFunction::softmax;
  const double scale = o.scaling_factor != 0.0f ? o.scaling_factor : 1.0;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const float* x = x_all + t * experts;
    const float* dp = dp_all + t * k;
    const int32_t* c = idx_all + t * k;
    float* dx = dx_all + t * experts;
    double g[kMoeMaxExperts];  // d loss / d (unscaled weight j)
    for (int64_t j = 0; j < k; ++j) g[j] = scale * dp[j];
    if (softmax && o.pre_softmax) {
      // p_j = s[c_j]: dx_e = s_e · ([e chosen] g_e − Σ_j g_j s[c_j]) over the whole row.
      double s[kMoeMaxExperts], dot = 0.0;
      softmax_row(x, experts, s);
      for (int64_t j = 0; j < k; ++j) dot += g[j] * s[c[j]];
      double ds[kMoeMaxExperts] = {};
      for (int64_t j = 0; j < k; ++j) ds[c[j]] = g[j];
      for (int64_t e = 0; e < experts; ++e) dx[e] += static_cast<float>(s[e] * (ds[e] - dot));
    } else if (softmax) {
      // p = softmax over the chosen logits: dx[c_j] = q_j (g_j − Σ_l g_l q_l).
      double q[kMoeMaxExperts], mx = -INFINITY, sum = 0.0, dot = 0.0;
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, static_cast<double>(x[c[j]]));
      for (int64_t j = 0; j < k; ++j) sum += q[j] = std::exp(x[c[j]] - mx);
      for (int64_t j = 0; j < k; ++j) dot += g[j] * (q[j] /= sum);
      for (int64_t j = 0; j < k; ++j) dx[c[j]] += static_cast<float>(q[j] * (g[j] - dot));
    } else {
      // p_j = σ_j / S (S = Σ σ_l + 1e-20; p = σ when k = 1): dσ_j = g_j/S − Σ_l g_l σ_l / S²,
      // then dx = dσ · σ(1 − σ).
      double sg[kMoeMaxExperts], sum = 1e-20, dot = 0.0;
      for (int64_t j = 0; j < k; ++j) sum += sg[j] = sigmoid(x[c[j]]);
      for (int64_t j = 0; j < k; ++j) dot += g[j] * sg[j];
      for (int64_t j = 0; j < k; ++j) {
        const double dsig = k > 1 ? g[j] / sum - dot / (sum * sum) : g[j];
        dx[c[j]] += static_cast<float>(dsig * sg[j] * (1.0 - sg[j]));
      }
    }
  }
}

namespace {

// Monotone map of a float onto uint32 (a < b ⇔ key(a) < key(b)); ±0 share a key and NaN ranks
// above +inf, as torch.topk ranks it.
uint32_t order_key(float v) {
  if (v == 0.0f) v = 0.0f;
  if (std::isnan(v)) return 0xffffffffu;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

}  // namespace

void moe_routing_map_fwd(const TensorView& routing_probs, const TensorView& routing_map, const TensorView& probs,
                         const TensorView& indices, int64_t capacity, MoeDropPolicy policy, bool pad_to_capacity) {
  const int64_t rows = probs.dim(0), k = probs.dim(1), experts = routing_probs.dim(1);
  check_indices(indices, experts, "moe_routing_map_fwd");
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
  auto key_of = [&](int64_t i) { return order_key(policy == MoeDropPolicy::probs ? p[i] : 1.0f); };
  const uint32_t zero_key = order_key(0.0f);
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
  check_indices(indices, experts, "moe_routing_map_bwd");
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
