// Owns the MoE router's per-row arithmetic, which both backends run (DESIGN: "CUDA without a GPU"):
// top-k selection, softmax / log-sum-exp / sigmoid over one row in double, group-limited routing,
// one token's routing and its backward, and the rows of the load-balancing and z losses. The CPU
// kernels (backend/cpu/moe_router*.cpp) call these with scratch on their stack, the CUDA kernels
// (backend/cuda/kernels/moe_router.cu) with scratch in shared memory: one thread per row on both.
// Written with ::exp/::log on doubles (the same glibc functions std::exp/std::log call on the
// host) and hand-written max/fill loops, so the host code is what the CPU kernels always ran.
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/moe_router_args.h"
#include "base/dtype.h"
#include "base/hd.h"

namespace mt {

MT_HD inline double moe_max(double a, double b) { return a < b ? b : a; }  // std::max's choice

MT_HD inline double moe_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// Writes the k best of v[0..n) among those with allowed[e] set into out (best first; equal values
// to the lower index, as the strict > keeps the first maximum) and clears their allowed flags.
// O(k·n): k and n are small, and it needs no scratch.
MT_HD inline void moe_select_topk(const float* v, bool* allowed, int64_t n, int64_t k, int32_t* out) {
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < n; ++e)
      if (allowed[e] && (best < 0 || v[e] > v[best])) best = e;
    out[j] = static_cast<int32_t>(best);
    allowed[best] = false;
  }
}

// out[e] = softmax(x)[e] in double.
MT_HD inline void moe_softmax_row(const float* x, int64_t n, double* out) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < n; ++e) mx = moe_max(mx, static_cast<double>(x[e]));
  for (int64_t e = 0; e < n; ++e) sum += out[e] = exp(x[e] - mx);
  for (int64_t e = 0; e < n; ++e) out[e] /= sum;
}

// logsumexp(x) and, when `soft` is given, softmax(x) in double.
MT_HD inline double moe_logsumexp_row(const float* x, int64_t n, double* soft) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < n; ++e) mx = moe_max(mx, static_cast<double>(x[e]));
  for (int64_t e = 0; e < n; ++e) {
    const double v = exp(x[e] - mx);
    sum += v;
    if (soft) soft[e] = v;
  }
  if (soft)
    for (int64_t e = 0; e < n; ++e) soft[e] /= sum;
  return mx + log(sum);
}

// Scratch of one row's routing (E = experts, G = num_groups; each array at least that long).
struct MoeRouteScratch {
  double* score;       // [E]
  float* sel;          // [E]
  bool* allowed;       // [E]
  float* group_score;  // [G]
  bool* group_open;    // [G]
  bool* in_group;      // [E / G]
  int32_t* picked;     // [max(G, topk)]
};

// Group-limited routing: leaves allowed[e] set only for the experts of the group_topk groups whose
// top-(topk/group_topk) selection values sum highest (ties to the lower group).
MT_HD inline void moe_limit_to_groups(const float* sel, bool* allowed, int64_t experts, const MoeRouterOptions& o,
                                      const MoeRouteScratch& s) {
  const int64_t size = experts / o.num_groups, per_group = o.topk / o.group_topk;
  for (int64_t g = 0; g < o.num_groups; ++g) {
    for (int64_t e = 0; e < size; ++e) s.in_group[e] = true;
    moe_select_topk(sel + g * size, s.in_group, size, per_group, s.picked);
    double sum = 0.0;
    for (int64_t j = 0; j < per_group; ++j) sum += sel[g * size + s.picked[j]];
    s.group_score[g] = static_cast<float>(sum);
    s.group_open[g] = true;
  }
  moe_select_topk(s.group_score, s.group_open, o.num_groups, o.group_topk, s.picked);
  // moe_select_topk cleared the flags of the chosen groups: closed now means chosen.
  for (int64_t e = 0; e < experts; ++e) allowed[e] = !s.group_open[e / size];
}

// Sinkhorn routing's weights are those of plain routing with σ (k = 1) or a pre-top-k softmax
// (k > 1), unscaled: the same forward and backward, with another choice in training.
MT_HD inline MoeRouterOptions moe_effective_router(const MoeRouterOptions& in) {
  if (!in.sinkhorn) return in;
  MoeRouterOptions o;
  o.topk = in.topk;
  o.score_function = in.topk == 1 ? MoeScoreFunction::sigmoid : MoeScoreFunction::softmax;
  o.pre_softmax = in.topk > 1;
  return o;
}

// One token's routing (ops/moe_router.h, moe_router_fwd): x = logits [E], bias [E] or null,
// select [E] (Sinkhorn's scores, which the top-k then compares) or null; writes p [k] and c [k].
MT_HD inline void moe_route_row(const float* x, int64_t experts, const float* bias, const float* select,
                                const MoeRouterOptions& options, float* p, int32_t* c, const MoeRouteScratch& s) {
  const MoeRouterOptions o = moe_effective_router(options);
  const int64_t k = o.topk;
  const bool softmax = o.score_function == MoeScoreFunction::softmax;
  const double scale = o.scaling_factor != 0.0f ? o.scaling_factor : 1.0;
  double* score = s.score;  // the unbiased score (softmax or σ) in double; unused for post-softmax
  float* sel = s.sel;       // what the top-k compares
  bool* allowed = s.allowed;
  if (softmax && o.pre_softmax) moe_softmax_row(x, experts, score);
  for (int64_t e = 0; e < experts; ++e) {
    if (!softmax) score[e] = moe_sigmoid(x[e]);
    if (select)
      sel[e] = select[e];
    else if (softmax)
      sel[e] = o.pre_softmax ? static_cast<float>(score[e]) : x[e];
    else
      sel[e] = bias ? static_cast<float>(score[e]) + bias[e] : static_cast<float>(score[e]);
    allowed[e] = true;
  }
  if (o.num_groups > 0) moe_limit_to_groups(sel, allowed, experts, o, s);
  moe_select_topk(sel, allowed, experts, k, c);
  if (softmax && !o.pre_softmax) {
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < k; ++j) mx = moe_max(mx, static_cast<double>(x[c[j]]));
    for (int64_t j = 0; j < k; ++j) sum += exp(x[c[j]] - mx);
    for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(scale * exp(x[c[j]] - mx) / sum);
  } else if (!softmax && k > 1) {
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += score[c[j]];
    for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(scale * score[c[j]] / (sum + 1e-20));
  } else {
    for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(scale * score[c[j]]);
  }
}

// Scratch of one row's routing backward.
struct MoeRouteBwdScratch {
  double* g;   // [k]
  double* s;   // [E] (pre-softmax only)
  double* ds;  // [E] (pre-softmax only)
  double* q;   // [k]
};

// Accumulates one token's dx [E] from dp [k] (ops/moe_router.h, moe_router_bwd).
MT_HD inline void moe_route_row_bwd(float* dx, const float* dp, const float* x, const int32_t* c, int64_t experts,
                                    const MoeRouterOptions& options, const MoeRouteBwdScratch& w) {
  const MoeRouterOptions o = moe_effective_router(options);
  const int64_t k = o.topk;
  const bool softmax = o.score_function == MoeScoreFunction::softmax;
  const double scale = o.scaling_factor != 0.0f ? o.scaling_factor : 1.0;
  double* g = w.g;  // d loss / d (unscaled weight j)
  for (int64_t j = 0; j < k; ++j) g[j] = scale * dp[j];
  if (softmax && o.pre_softmax) {
    // p_j = s[c_j]: dx_e = s_e · ([e chosen] g_e − Σ_j g_j s[c_j]) over the whole row.
    double* s = w.s;
    double* ds = w.ds;
    double dot = 0.0;
    moe_softmax_row(x, experts, s);
    for (int64_t j = 0; j < k; ++j) dot += g[j] * s[c[j]];
    for (int64_t e = 0; e < experts; ++e) ds[e] = 0.0;
    for (int64_t j = 0; j < k; ++j) ds[c[j]] = g[j];
    for (int64_t e = 0; e < experts; ++e) dx[e] += static_cast<float>(s[e] * (ds[e] - dot));
  } else if (softmax) {
    // p = softmax over the chosen logits: dx[c_j] = q_j (g_j − Σ_l g_l q_l).
    double* q = w.q;
    double mx = -INFINITY, sum = 0.0, dot = 0.0;
    for (int64_t j = 0; j < k; ++j) mx = moe_max(mx, static_cast<double>(x[c[j]]));
    for (int64_t j = 0; j < k; ++j) sum += q[j] = exp(x[c[j]] - mx);
    for (int64_t j = 0; j < k; ++j) dot += g[j] * (q[j] /= sum);
    for (int64_t j = 0; j < k; ++j) dx[c[j]] += static_cast<float>(q[j] * (g[j] - dot));
  } else {
    // p_j = σ_j / S (S = Σ σ_l + 1e-20; p = σ when k = 1): dσ_j = g_j/S − Σ_l g_l σ_l / S²,
    // then dx = dσ · σ(1 − σ).
    double* sg = w.q;
    double sum = 1e-20, dot = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += sg[j] = moe_sigmoid(x[c[j]]);
    for (int64_t j = 0; j < k; ++j) dot += g[j] * sg[j];
    for (int64_t j = 0; j < k; ++j) {
      const double dsig = k > 1 ? g[j] / sum - dot / (sum * sum) : g[j];
      dx[c[j]] += static_cast<float>(dsig * sg[j] * (1.0 - sg[j]));
    }
  }
}

// The load-balancing scores of one row: softmax, or σ normalised over all experts (+1e-20 as
// Megatron). Also returns σ in `sig` for the sigmoid backward (sig unused for softmax).
MT_HD inline void moe_aux_scores_row(const float* x, int64_t n, MoeScoreFunction f, double* scores, double* sig) {
  if (f == MoeScoreFunction::softmax) {
    moe_logsumexp_row(x, n, scores);
    return;
  }
  double sum = 1e-20;
  for (int64_t e = 0; e < n; ++e) sum += sig[e] = 1.0 / (1.0 + exp(-static_cast<double>(x[e])));
  for (int64_t e = 0; e < n; ++e) scores[e] = sig[e] / sum;
}

// Accumulates one row's dx [E] from ds [E] through the scores (s, sig: scratch [E]).
MT_HD inline void moe_aux_scores_row_bwd(float* dx, const float* ds, const float* x, int64_t experts,
                                         MoeScoreFunction f, double* s, double* sig) {
  double dot = 0.0;
  moe_aux_scores_row(x, experts, f, s, sig);
  if (f == MoeScoreFunction::softmax) {
    for (int64_t e = 0; e < experts; ++e) dot += ds[e] * s[e];
    for (int64_t e = 0; e < experts; ++e) dx[e] += static_cast<float>(s[e] * (ds[e] - dot));
  } else {
    // s_e = σ_e / S: dσ_e = ds_e / S − Σ_l ds_l σ_l / S², then dx = dσ · σ(1 − σ).
    double sum = 1e-20;
    for (int64_t e = 0; e < experts; ++e) {
      sum += sig[e];
      dot += ds[e] * sig[e];
    }
    for (int64_t e = 0; e < experts; ++e) {
      const double dsig = ds[e] / sum - dot / (sum * sum);
      dx[e] += static_cast<float>(dsig * sig[e] * (1.0 - sig[e]));
    }
  }
}

// Monotone map of a float onto uint32 (a < b ⇔ key(a) < key(b)); ±0 share a key and NaN ranks
// above +inf, as torch.topk ranks it: the capacity ranking's key.
MT_HD inline uint32_t moe_order_key(float v) {
  if (v == 0.0f) v = 0.0f;
  if (v != v) return 0xffffffffu;  // NaN
  const uint32_t b = f32_bits(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// coeff · E / (k · N² · B): the factor on Σ P·counts (Megatron's E·coeff/(k·N·N), then / B).
MT_HD inline double moe_aux_loss_factor(int64_t experts, int64_t seqs, int64_t total_tokens, int64_t topk,
                                        double coeff) {
  const double n = static_cast<double>(total_tokens);
  return coeff * static_cast<double>(experts) / (static_cast<double>(topk) * n * n) / static_cast<double>(seqs);
}

// One layer's expert-bias update (f32 arithmetic, as Megatron's): bias[e] += rate · sign(mean − c[e]).
MT_HD inline void moe_expert_bias_row(float* bias, const float* c, int64_t experts, float rate) {
  // Megatron's f32 sum (exact: integer counts below 2^24) and f32 division.
  double total = 0.0;
  for (int64_t e = 0; e < experts; ++e) total += c[e];
  const float mean = static_cast<float>(total) / static_cast<float>(experts);
  for (int64_t e = 0; e < experts; ++e) {
    const float sign = mean > c[e] ? 1.0f : (mean < c[e] ? -1.0f : 0.0f);
    bias[e] += sign * rate;
  }
}

}  // namespace mt
