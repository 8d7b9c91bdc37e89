// Tests for ops/moe_router.h against fp64 references written here with plain loops and sorts
// (stable sorts: ties to the lower index) from Megatron's formulas: routing over softmax/sigmoid,
// pre-softmax, k = 1/2/4, E = 8/16, group-limited routing, expert bias and scaling; each backward
// against central differences of the fp64 reference; capacity (the kept tokens are exactly those the
// policy names, with and without padding); the aux, sequence-aux, global-aux and z losses; the
// expert-bias update rule; and the refusals.
#include "ops/moe_router.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "testing.h"

namespace mt::test {
namespace {

using Vec = std::vector<double>;

Vec softmax_ref(const double* x, int64_t n) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t e = 0; e < n; ++e) mx = std::max(mx, x[e]);
  Vec s(n);
  for (int64_t e = 0; e < n; ++e) sum += s[e] = std::exp(x[e] - mx);
  for (double& v : s) v /= sum;
  return s;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// `candidates` (ascending) ordered best first by v; the stable sort keeps ties in index order.
std::vector<int> ranked(const Vec& v, std::vector<int> candidates) {
  std::stable_sort(candidates.begin(), candidates.end(), [&](int a, int b) { return v[a] > v[b]; });
  return candidates;
}

std::vector<int> iota(int64_t n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

struct Route {
  std::vector<int> idx;  // [T, k] best first
  Vec probs;             // [T, k]
  Vec dense;             // [T, E]
};

// Megatron's topk_routing_with_score_function in double, token by token.
Route route_ref(const Vec& x, int64_t tokens, int64_t experts, const Vec& bias, const MoeRouterOptions& o) {
  const int64_t k = o.topk;
  const bool softmax = o.score_function == MoeScoreFunction::softmax;
  Route r{std::vector<int>(tokens * k), Vec(tokens * k), Vec(tokens * experts, 0.0)};
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = x.data() + t * experts;
    Vec score(experts), sel(experts);
    if (softmax) score = softmax_ref(row, experts);
    for (int64_t e = 0; e < experts; ++e) {
      if (!softmax) score[e] = sigmoid_ref(row[e]);
      sel[e] = softmax ? (o.pre_softmax ? score[e] : row[e]) : score[e] + (bias.empty() ? 0.0 : bias[e]);
    }
    std::vector<int> candidates = iota(experts);
    if (o.num_groups > 0) {
      const int64_t size = experts / o.num_groups;
      Vec group_score(o.num_groups);
      for (int64_t g = 0; g < o.num_groups; ++g) {
        Vec members(sel.begin() + g * size, sel.begin() + (g + 1) * size);
        std::sort(members.begin(), members.end(), std::greater<>());
        group_score[g] = std::accumulate(members.begin(), members.begin() + o.topk / o.group_topk, 0.0);
      }
      std::vector<int> groups = ranked(group_score, iota(o.num_groups));
      candidates.clear();
      for (int e = 0; e < experts; ++e)
        if (std::find(groups.begin(), groups.begin() + o.group_topk, e / size) != groups.begin() + o.group_topk)
          candidates.push_back(e);
    }
    const std::vector<int> order = ranked(sel, candidates);
    double denom = 0.0;
    for (int64_t j = 0; j < k; ++j) denom += softmax ? std::exp(row[order[j]]) : score[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      const int c = order[j];
      double p;
      if (softmax)
        p = o.pre_softmax ? score[c] : std::exp(row[c]) / denom;
      else
        p = k > 1 ? score[c] / (denom + 1e-20) : score[c];
      if (o.scaling_factor != 0.0f) p *= o.scaling_factor;
      r.idx[t * k + j] = c;
      r.probs[t * k + j] = p;
      r.dense[t * experts + c] = p;
    }
  }
  return r;
}

// Central differences of f w.r.t. x (double), h = 1e-5: truncation ~h²·|f'''| ≈ 1e-10 and
// cancellation ~1e-16·|f|/h ≈ 1e-11 here, far below the f32 tolerances they are compared with.
Vec fd_ref(Vec& x, const std::function<double()>& f, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// What an accumulating backward added on top of `before`.
std::vector<float> added(HostTensor& t, const std::vector<float>& before) {
  std::vector<float> d(before.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = t.f32()[i] - before[i];
  return d;
}

std::vector<float> values(HostTensor& t) { return {t.f32(), t.f32() + t.numel()}; }

// Router outputs are O(1); the kernel rounds its double result once (6e-8 relative), and an
// accumulating backward adds the rounding of the N(0, 1) prior it lands on.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

struct RouterCase {
  const char* name;
  MoeScoreFunction score;
  bool pre_softmax;
  int64_t topk, experts, num_groups, group_topk;
  bool bias;
  float scaling;
};

std::vector<RouterCase> router_cases() {
  using F = MoeScoreFunction;
  return {
      {"SoftmaxTop2E8", F::softmax, false, 2, 8, 0, 0, false, 0.0f},  // Mixtral
      {"SoftmaxPreTop1E8", F::softmax, true, 1, 8, 0, 0, false, 0.0f},
      {"SoftmaxPreTop4E16Scaled", F::softmax, true, 4, 16, 0, 0, false, 2.5f},
      {"SoftmaxTop4E16Groups", F::softmax, false, 4, 16, 4, 2, false, 0.0f},
      {"SoftmaxPreTop4E16Groups", F::softmax, true, 4, 16, 8, 2, false, 1.5f},
      {"SigmoidTop1E8", F::sigmoid, false, 1, 8, 0, 0, false, 0.0f},
      {"SigmoidTop2E8Scaled", F::sigmoid, false, 2, 8, 0, 0, false, 2.5f},
      {"SigmoidTop4E16Bias", F::sigmoid, false, 4, 16, 0, 0, true, 0.0f},
      {"SigmoidTop4E16BiasGroups", F::sigmoid, false, 4, 16, 4, 2, true, 2.5f},  // DeepSeek-V3-like
      {"SigmoidTop2E16BiasOneGroup", F::sigmoid, false, 2, 16, 4, 1, true, 0.0f},
  };
}

MoeRouterOptions options_of(const RouterCase& c) {
  MoeRouterOptions o;
  o.topk = c.topk;
  o.score_function = c.score;
  o.pre_softmax = c.pre_softmax;
  o.num_groups = c.num_groups;
  o.group_topk = c.group_topk;
  o.scaling_factor = c.scaling;
  return o;
}

class MoeRouterCase : public ::testing::TestWithParam<RouterCase> {
 protected:
  static constexpr int64_t kTokens = 24;
  RouterCase c = GetParam();
  MoeRouterOptions o = options_of(c);
  HostTensor logits = randn({kTokens, c.experts}, 301, 1.5f);
  // σ differences between neighbours in the ranking are ~0.05: a bias of this size reorders them.
  HostTensor bias = c.bias ? randn({c.experts}, 302, 0.3f) : HostTensor();
  Vec x = to_double(logits);
  Vec bias_d = c.bias ? to_double(bias) : Vec();
  HostTensor probs = zeros({kTokens, c.topk}), indices = zeros({kTokens, c.topk}, DType::i32);

  void forward() {
    moe_router_fwd(probs.view(), indices.view(), logits.view(), c.bias ? bias.view() : TensorView(), TensorView(), o);
  }
};

TEST_P(MoeRouterCase, ForwardMatchesReference) {
  forward();
  const Route ref = route_ref(x, kTokens, c.experts, bias_d, o);
  for (int64_t i = 0; i < kTokens * c.topk; ++i)
    ASSERT_EQ(indices.i32()[i], ref.idx[i]) << "token " << i / c.topk << " choice " << i % c.topk;
  expect_close(probs.f32(), ref.probs, kAtol, kRtol, "probs");
  // The options under test must change the outcome here, or the case proves nothing about them.
  if (c.bias) {
    EXPECT_NE(route_ref(x, kTokens, c.experts, Vec(), o).idx, ref.idx) << "the bias changed no choice";
  }
  if (c.num_groups > 0) {
    MoeRouterOptions flat = o;
    flat.num_groups = flat.group_topk = 0;
    EXPECT_NE(route_ref(x, kTokens, c.experts, bias_d, flat).idx, ref.idx) << "the groups changed no choice";
  }
}

// Backward of Σ W·routing_probs (W fixed, so reordering within a token's choices is harmless)
// against central differences of the fp64 reference, which re-selects at each probe: the choices
// must not move under the probe, checked.
TEST_P(MoeRouterCase, BackwardMatchesFiniteDifferences) {
  forward();
  const int64_t k = c.topk, e_n = c.experts;
  HostTensor w = randn({kTokens, e_n}, 303), dprobs = zeros({kTokens, k}), dlogits = randn({kTokens, e_n}, 304);
  for (int64_t i = 0; i < kTokens * k; ++i) dprobs.f32()[i] = w.f32()[(i / k) * e_n + indices.i32()[i]];
  const std::vector<float> before = values(dlogits);
  moe_router_bwd(dlogits.view(), dprobs.view(), logits.view(), indices.view(), o);
  const Route base = route_ref(x, kTokens, e_n, bias_d, o);
  auto chosen_set = [&](const Route& r, int64_t t) {
    return std::set<int>(r.idx.begin() + t * k, r.idx.begin() + (t + 1) * k);
  };
  const Vec fd = fd_ref(x, [&] {
    const Route r = route_ref(x, kTokens, e_n, bias_d, o);
    for (int64_t t = 0; t < kTokens; ++t) EXPECT_EQ(chosen_set(r, t), chosen_set(base, t)) << "probe moved token " << t;
    double s = 0.0;
    for (int64_t i = 0; i < kTokens * e_n; ++i) s += w.f32()[i] * r.dense[i];
    return s;
  });
  expect_close(added(dlogits, before).data(), fd, kAtol, kRtol, "dlogits");
}

INSTANTIATE_TEST_SUITE_P(MoeRouter, MoeRouterCase, ::testing::ValuesIn(router_cases()),
                         [](const ::testing::TestParamInfo<RouterCase>& info) { return info.param.name; });

// Exact ties go to the lower index: among experts, and among groups.
TEST(MoeRouter, TiesGoToTheLowerIndex) {
  const int64_t experts = 8;
  HostTensor logits = zeros({2, experts}), probs = zeros({2, 4}), indices = zeros({2, 4}, DType::i32);
  // Row 1: experts 1 and 5 tie on top, the other six tie below them.
  for (int64_t e = 0; e < experts; ++e) logits.f32()[experts + e] = e % 4 == 1 ? 1.0f : 0.0f;
  MoeRouterOptions o;
  o.topk = 4;
  o.pre_softmax = true;
  moe_router_fwd(probs.view(), indices.view(), logits.view(), TensorView(), TensorView(), o);
  EXPECT_EQ(std::vector<int32_t>(indices.i32(), indices.i32() + 8), (std::vector<int32_t>{0, 1, 2, 3, 1, 5, 0, 2}));
  // Two groups of four with equal scores: group 0 wins, its experts 0..3 are the only candidates.
  o.num_groups = 2;
  o.group_topk = 1;
  moe_router_fwd(probs.view(), indices.view(), logits.view(), TensorView(), TensorView(), o);
  EXPECT_EQ(std::vector<int32_t>(indices.i32(), indices.i32() + 4), (std::vector<int32_t>{0, 1, 2, 3}));
}

// ---- Capacity ----

TEST(MoeRouterCapacity, FormulaMatchesMegatron) {
  EXPECT_EQ(moe_expert_capacity(10, 8, 2, 1.0), 3);   // ceil(2.5)
  EXPECT_EQ(moe_expert_capacity(8, 8, 2, 1.0), 2);    // exact: no rounding up
  EXPECT_EQ(moe_expert_capacity(16, 16, 4, 0.5), 2);
  EXPECT_EQ(moe_expert_capacity(24, 8, 2, 0.75), 5);  // ceil(4.5)
  // Python's (50·4/8)·2.2 = 55.00000000000001, so math.ceil gives 56, not 55.
  EXPECT_EQ(moe_expert_capacity(50, 8, 4, 2.2), 56);
  expect_error_mentioning([] { moe_expert_capacity(8, 8, 2, 0.0); }, "capacity-factor");
}

struct Dense {
  std::vector<float> probs;
  std::vector<uint8_t> map;
};

// apply_router_token_dropping by its definition: entry (t, e) of the dense column ranks by how many
// entries beat it (larger key, or equal key at a lower token); the top `cap` are kept.
Dense capacity_ref(HostTensor& probs, HostTensor& indices, int64_t experts, int64_t cap, MoeDropPolicy policy,
                   bool pad) {
  const int64_t tokens = probs.shape[0], k = probs.shape[1];
  Dense d{std::vector<float>(tokens * experts, 0.0f), std::vector<uint8_t>(tokens * experts, 0)};
  std::vector<uint8_t> chosen(tokens * experts, 0);
  for (int64_t i = 0; i < tokens * k; ++i) {
    d.probs[(i / k) * experts + indices.i32()[i]] = probs.f32()[i];
    chosen[(i / k) * experts + indices.i32()[i]] = 1;
  }
  auto key = [&](int64_t t, int64_t e) {
    return policy == MoeDropPolicy::probs ? d.probs[t * experts + e] : static_cast<float>(chosen[t * experts + e]);
  };
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t better = 0;
      for (int64_t u = 0; u < tokens; ++u) better += key(u, e) > key(t, e) || (key(u, e) == key(t, e) && u < t);
      const bool kept = better < cap;
      d.map[t * experts + e] = pad ? kept : (kept && chosen[t * experts + e]);
    }
  for (size_t i = 0; i < d.map.size(); ++i)
    if (!d.map[i]) d.probs[i] = 0.0f;
  return d;
}

struct Routed {
  HostTensor probs, indices;
};

// Real router output: softmax top-k over random logits, skewed so some experts overflow.
Routed routed(int64_t tokens, int64_t experts, int64_t topk, uint64_t seed) {
  HostTensor logits = randn({tokens, experts}, seed, 1.5f);
  for (int64_t t = 0; t < tokens; ++t) logits.f32()[t * experts] += 1.0f;  // expert 0 is popular
  Routed r{zeros({tokens, topk}), zeros({tokens, topk}, DType::i32)};
  MoeRouterOptions o;
  o.topk = topk;
  moe_router_fwd(r.probs.view(), r.indices.view(), logits.view(), TensorView(), TensorView(), o);
  return r;
}

void check_capacity(int64_t tokens, int64_t experts, int64_t topk, double factor, MoeDropPolicy policy, bool pad) {
  Routed r = routed(tokens, experts, topk, 311 + experts);
  MoeCapacityOptions cap{factor, policy, pad};
  HostTensor rp = randn({tokens, experts}, 312), map = zeros({tokens, experts}, DType::u8);  // overwritten
  moe_routing_map_fwd(rp.view(), map.view(), r.probs.view(), r.indices.view(), cap);
  const int64_t c = moe_expert_capacity(tokens, experts, topk, factor);
  const Dense ref = capacity_ref(r.probs, r.indices, experts, c, policy, pad);
  ASSERT_EQ(std::vector<uint8_t>(map.u8(), map.u8() + map.numel()), ref.map);
  ASSERT_EQ(values(rp), ref.probs);
  // The case must both drop and (for padding) pad, or it proves nothing about either.
  int64_t dropped = 0, short_experts = 0;
  for (int64_t e = 0; e < experts; ++e) {
    int64_t chose = 0, kept = 0;
    for (int64_t i = 0; i < tokens * topk; ++i) chose += r.indices.i32()[i] == e;
    for (int64_t t = 0; t < tokens; ++t) kept += map.u8()[t * experts + e];
    dropped += std::max<int64_t>(0, chose - c);
    short_experts += chose < c;
    if (pad) {
      EXPECT_EQ(kept, c) << "expert " << e << " padded to capacity";
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(short_experts, 0);
  // The policy in words: position keeps each expert's earliest choosers; probs keeps its
  // heaviest, so no dropped chooser outweighs a kept one.
  for (int64_t e = 0; e < experts; ++e) {
    int64_t seen = 0;
    float min_kept = INFINITY, max_dropped = -INFINITY;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < topk; ++j) {
        if (r.indices.i32()[t * topk + j] != e) continue;
        const bool kept = map.u8()[t * experts + e];
        const float p = r.probs.f32()[t * topk + j];
        if (policy == MoeDropPolicy::position) {
          EXPECT_EQ(kept, seen < c) << "token " << t << " expert " << e;
        }
        ++seen;
        if (kept)
          min_kept = std::min(min_kept, p);
        else
          max_dropped = std::max(max_dropped, p);
      }
    if (policy == MoeDropPolicy::probs) {
      EXPECT_GE(min_kept, max_dropped) << "expert " << e;
    }
  }
}

TEST(MoeRouterCapacity, ProbsPolicyKeepsTheHeaviest) { check_capacity(24, 8, 2, 0.75, MoeDropPolicy::probs, false); }
TEST(MoeRouterCapacity, PositionPolicyKeepsTheEarliest) {
  check_capacity(24, 8, 2, 0.75, MoeDropPolicy::position, false);
}
TEST(MoeRouterCapacity, ProbsPolicyPadded) { check_capacity(24, 8, 2, 0.75, MoeDropPolicy::probs, true); }
TEST(MoeRouterCapacity, PositionPolicyPadded) { check_capacity(24, 8, 2, 0.75, MoeDropPolicy::position, true); }
TEST(MoeRouterCapacity, Top4Of16BothPolicies) {
  for (bool pad : {false, true}) {
    check_capacity(40, 16, 4, 1.0, MoeDropPolicy::probs, pad);
    check_capacity(40, 16, 4, 1.0, MoeDropPolicy::position, pad);
  }
}

// Equal weights: the lower token index is kept, under either policy.
TEST(MoeRouterCapacity, TiesKeepTheLowerToken) {
  const int64_t tokens = 6, experts = 2;
  HostTensor probs = zeros({tokens, 1}), indices = zeros({tokens, 1}, DType::i32);
  const float p[] = {0.5f, 0.7f, 0.5f, 0.5f, 0.7f, 0.5f};  // all choose expert 0
  std::copy(p, p + tokens, probs.f32());
  HostTensor rp = zeros({tokens, experts}), map = zeros({tokens, experts}, DType::u8);
  // C = ceil(6/2 · 1.0) = 3: probs keeps tokens 1, 4 (0.7) and 0 (first 0.5); position keeps 0, 1, 2.
  moe_routing_map_fwd(rp.view(), map.view(), probs.view(), indices.view(), {1.0, MoeDropPolicy::probs, false});
  std::vector<uint8_t> col0;
  for (int64_t t = 0; t < tokens; ++t) col0.push_back(map.u8()[t * experts]);
  EXPECT_EQ(col0, (std::vector<uint8_t>{1, 1, 0, 0, 1, 0}));
  moe_routing_map_fwd(rp.view(), map.view(), probs.view(), indices.view(), {1.0, MoeDropPolicy::position, false});
  col0.clear();
  for (int64_t t = 0; t < tokens; ++t) col0.push_back(map.u8()[t * experts]);
  EXPECT_EQ(col0, (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
  // Padding fills expert 1 (nobody chose it) with the first three tokens, weight 0.
  moe_routing_map_fwd(rp.view(), map.view(), probs.view(), indices.view(), {1.0, MoeDropPolicy::probs, true});
  for (int64_t t = 0; t < tokens; ++t) {
    EXPECT_EQ(map.u8()[t * experts + 1], t < 3) << "token " << t;
    EXPECT_EQ(rp.f32()[t * experts + 1], 0.0f);
  }
}

// Dropless is the scatter; a capacity above the token count keeps everything, and with padding
// sends every token to every expert (Megatron's all-ones mask).
TEST(MoeRouterCapacity, DroplessAndAmpleCapacity) {
  const int64_t tokens = 12, experts = 8, k = 2;
  Routed r = routed(tokens, experts, k, 321);
  HostTensor rp = zeros({tokens, experts}), map = zeros({tokens, experts}, DType::u8);
  const Dense scatter = capacity_ref(r.probs, r.indices, experts, tokens, MoeDropPolicy::probs, false);
  moe_routing_map_fwd(rp.view(), map.view(), r.probs.view(), r.indices.view(), {});
  EXPECT_EQ(values(rp), scatter.probs);
  EXPECT_EQ(std::vector<uint8_t>(map.u8(), map.u8() + map.numel()), scatter.map);
  ASSERT_GT(moe_expert_capacity(tokens, experts, k, 5.0), tokens);
  moe_routing_map_fwd(rp.view(), map.view(), r.probs.view(), r.indices.view(), {5.0, MoeDropPolicy::probs, false});
  EXPECT_EQ(std::vector<uint8_t>(map.u8(), map.u8() + map.numel()), scatter.map);
  moe_routing_map_fwd(rp.view(), map.view(), r.probs.view(), r.indices.view(), {5.0, MoeDropPolicy::probs, true});
  EXPECT_EQ(std::vector<uint8_t>(map.u8(), map.u8() + map.numel()), std::vector<uint8_t>(tokens * experts, 1));
  EXPECT_EQ(values(rp), scatter.probs);
}

// The backward gathers where kept (accumulating); counts sum the final map per expert.
TEST(MoeRouterCapacity, BackwardGathersKeptEntriesAndCountsSumTheMap) {
  const int64_t tokens = 24, experts = 8, k = 2;
  Routed r = routed(tokens, experts, k, 331);
  HostTensor rp = zeros({tokens, experts}), map = zeros({tokens, experts}, DType::u8);
  moe_routing_map_fwd(rp.view(), map.view(), r.probs.view(), r.indices.view(), {0.75, MoeDropPolicy::probs, true});
  HostTensor drp = randn({tokens, experts}, 332), dprobs = randn({tokens, k}, 333);
  const std::vector<float> before = values(dprobs);
  moe_routing_map_bwd(dprobs.view(), drp.view(), map.view(), r.indices.view());
  Vec ref(tokens * k);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int64_t at = (i / k) * experts + r.indices.i32()[i];
    ref[i] = before[i] + (map.u8()[at] ? drp.f32()[at] : 0.0f);
  }
  expect_close(dprobs.f32(), ref, 0.0, 1e-7, "dprobs");
  HostTensor counts = zeros({experts});
  counts.f32()[3] = 5.0f;  // accumulates
  moe_tokens_per_expert(counts.view(), map.view());
  const int64_t c = moe_expert_capacity(tokens, experts, k, 0.75);
  for (int64_t e = 0; e < experts; ++e) EXPECT_EQ(counts.f32()[e], c + (e == 3 ? 5 : 0)) << "expert " << e;
}

// ---- Losses ----

// compute_routing_scores_for_aux_loss in double: the scores and each token's top-k set.
struct AuxScores {
  Vec scores;                         // [T, E]
  std::vector<std::vector<int>> top;  // per token
};

AuxScores aux_scores_ref(const Vec& x, int64_t tokens, int64_t experts, int64_t topk, MoeScoreFunction f) {
  AuxScores a{Vec(tokens * experts), {}};
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = x.data() + t * experts;
    Vec s(experts);
    if (f == MoeScoreFunction::softmax) {
      s = softmax_ref(row, experts);
    } else {
      double sum = 0.0;
      for (int64_t e = 0; e < experts; ++e) sum += s[e] = sigmoid_ref(row[e]);
      for (double& v : s) v /= sum + 1e-20;
    }
    std::copy(s.begin(), s.end(), a.scores.begin() + t * experts);
    const std::vector<int> order = ranked(s, iota(experts));
    a.top.emplace_back(order.begin(), order.begin() + topk);
  }
  return a;
}

// switch_load_balancing_loss_func as its docstring states it: E · coeff · Σ_i f_i · P_i with
// f_i = tokens_i / (N · k), P_i = Σ_t scores_ti / N, over the given tokens.
double switch_loss_ref(const Vec& scores, const std::vector<int64_t>& tokens, int64_t experts,
                       const Vec& tokens_per_expert, double n, int64_t topk, double coeff) {
  double loss = 0.0;
  for (int64_t i = 0; i < experts; ++i) {
    double p = 0.0;
    for (int64_t t : tokens) p += scores[t * experts + i];
    loss += tokens_per_expert[i] / (n * topk) * (p / n);
  }
  return experts * coeff * loss;
}

TEST(MoeRouterLoss, AuxScoresMatchReferenceAndBackwardMatchesFiniteDifferences) {
  const int64_t tokens = 24, experts = 16, topk = 4, seqs = 3;
  for (MoeScoreFunction f : {MoeScoreFunction::softmax, MoeScoreFunction::sigmoid}) {
    SCOPED_TRACE(f == MoeScoreFunction::softmax ? "softmax" : "sigmoid");
    HostTensor logits = randn({tokens, experts}, 341, 1.5f), scores = zeros({tokens, experts});
    HostTensor counts = randn({seqs, experts}, 342);  // overwritten
    Vec x = to_double(logits);
    moe_aux_scores_fwd(scores.view(), counts.view(), logits.view(), topk, f);
    const AuxScores ref = aux_scores_ref(x, tokens, experts, topk, f);
    expect_close(scores.f32(), ref.scores, 1e-7, 1e-6, "scores");
    Vec ref_counts(seqs * experts, 0.0);
    for (int64_t t = 0; t < tokens; ++t)
      for (int e : ref.top[t]) ref_counts[(t % seqs) * experts + e] += 1;
    expect_close(counts.f32(), ref_counts, 1e-9, 0.0, "counts per sequence");
    // Backward of Σ W·scores.
    HostTensor w = randn({tokens, experts}, 343), dlogits = randn({tokens, experts}, 344);
    const std::vector<float> before = values(dlogits);
    moe_aux_scores_bwd(dlogits.view(), w.view(), logits.view(), f);
    const Vec fd = fd_ref(x, [&] {
      const Vec s = aux_scores_ref(x, tokens, experts, topk, f).scores;
      double sum = 0.0;
      for (size_t i = 0; i < s.size(); ++i) sum += w.f32()[i] * s[i];
      return sum;
    });
    expect_close(added(dlogits, before).data(), fd, kAtol, kRtol, "dlogits");
  }
}

// A load-balancing loss end to end: scores and counts from the logits, the loss op, and its
// gradient through both backward ops, against the reference loss (counts held fixed, as they
// carry no gradient in Megatron either).
struct LossRun {
  double loss;
  std::vector<float> dlogits;
};

LossRun run_aux_loss(HostTensor& logits, HostTensor& counts, int64_t n, int64_t topk, double coeff, MoeScoreFunction f,
                     float dloss) {
  const int64_t tokens = logits.shape[0], experts = logits.shape[1];
  HostTensor scores = zeros({tokens, experts}), own_counts = zeros(counts.shape), loss = zeros({1});
  moe_aux_scores_fwd(scores.view(), own_counts.view(), logits.view(), topk, f);
  moe_aux_loss_fwd(loss.view(), scores.view(), counts.view(), n, topk, coeff);
  // Small priors: both backwards accumulate, and what they add (~1e-4) must stay resolvable.
  HostTensor dscores = randn({tokens, experts}, 347, 1e-3f), dlogits = randn({tokens, experts}, 348, 1e-3f);
  const std::vector<float> dscores0 = values(dscores), dlogits0 = values(dlogits);
  moe_aux_loss_bwd(dscores.view(), dloss, counts.view(), n, topk, coeff);
  for (int64_t i = 0; i < dscores.numel(); ++i) dscores.f32()[i] -= dscores0[i];
  moe_aux_scores_bwd(dlogits.view(), dscores.view(), logits.view(), f);
  return {loss.f32()[0], added(dlogits, dlogits0)};
}

TEST(MoeRouterLoss, AuxLossMatchesSwitchFormulaAndFiniteDifferences) {
  const int64_t tokens = 24, experts = 8, topk = 2;
  const double coeff = 0.01;
  const float dloss = 0.5f;  // the main loss's backward scale
  for (MoeScoreFunction f : {MoeScoreFunction::softmax, MoeScoreFunction::sigmoid}) {
    SCOPED_TRACE(f == MoeScoreFunction::softmax ? "softmax" : "sigmoid");
    HostTensor logits = randn({tokens, experts}, 351, 1.5f), counts = zeros({1, experts});
    HostTensor scores = zeros({tokens, experts});
    moe_aux_scores_fwd(scores.view(), counts.view(), logits.view(), topk, f);
    const LossRun run = run_aux_loss(logits, counts, tokens, topk, coeff, f, dloss);
    Vec x = to_double(logits);
    const Vec cnt = to_double(counts);
    std::vector<int64_t> all(tokens);
    std::iota(all.begin(), all.end(), 0);
    auto ref = [&] {
      const Vec s = aux_scores_ref(x, tokens, experts, topk, f).scores;
      return switch_loss_ref(s, all, experts, cnt, tokens, topk, coeff);
    };
    EXPECT_NEAR(run.loss, ref(), 1e-6 * ref());
    // A balanced router gives coeff · E · Σ (k/E)(1/E)… ≈ coeff; this one is near it, not 0 or E·coeff.
    EXPECT_GT(run.loss, 0.5 * coeff);
    Vec fd = fd_ref(x, ref);
    for (double& g : fd) g *= dloss;
    // Gradients are ~coeff·E/(k·T) ≈ 2e-3 in size: 1e-9 absolute is f32 rounding of those.
    expect_close(run.dlogits.data(), fd, 1e-9, 1e-5, "dlogits");
  }
}

// Under sequence/tensor parallelism each rank holds part of the tokens, counts are summed across the
// ranks and N is the whole count: the ranks' losses then add up to the loss over all tokens.
TEST(MoeRouterLoss, AuxLossShardsSumToTheWholeBatchLoss) {
  const int64_t tokens = 24, experts = 8, topk = 2, ranks = 2, local = tokens / ranks;
  HostTensor logits = randn({tokens, experts}, 355, 1.5f), scores = zeros({tokens, experts});
  HostTensor counts = zeros({1, experts});
  HostTensor loss = zeros({1});
  moe_aux_scores_fwd(scores.view(), counts.view(), logits.view(), topk, MoeScoreFunction::softmax);
  moe_aux_loss_fwd(loss.view(), scores.view(), counts.view(), tokens, topk, 0.01);
  double sharded = 0.0;
  HostTensor summed = zeros({1, experts});
  std::vector<HostTensor> shard_scores;
  for (int64_t r = 0; r < ranks; ++r) {
    HostTensor c = zeros({1, experts});
    shard_scores.push_back(zeros({local, experts}));
    moe_aux_scores_fwd(shard_scores[r].view(), c.view(), logits.view().rows(r * local, local), topk,
                       MoeScoreFunction::softmax);
    for (int64_t e = 0; e < experts; ++e) summed.f32()[e] += c.f32()[e];  // the all-reduce over tp×cp
  }
  for (int64_t r = 0; r < ranks; ++r) {
    HostTensor l = zeros({1});
    moe_aux_loss_fwd(l.view(), shard_scores[r].view(), summed.view(), local * ranks, topk, 0.01);
    sharded += l.f32()[0];
  }
  EXPECT_NEAR(sharded, loss.f32()[0], 1e-6 * loss.f32()[0]);
}

// seq_aux_loss: the switch loss of each sequence on its own (its s tokens t = i·b + j, its counts),
// averaged over the b sequences.
TEST(MoeRouterLoss, SeqAuxLossIsThePerSequenceAverageAndMatchesFiniteDifferences) {
  const int64_t s = 8, b = 3, tokens = s * b, experts = 16, topk = 4;
  const double coeff = 1e-3;
  for (MoeScoreFunction f : {MoeScoreFunction::softmax, MoeScoreFunction::sigmoid}) {
    SCOPED_TRACE(f == MoeScoreFunction::softmax ? "softmax" : "sigmoid");
    HostTensor logits = randn({tokens, experts}, 361, 1.5f), counts = zeros({b, experts});
    HostTensor scores = zeros({tokens, experts});
    moe_aux_scores_fwd(scores.view(), counts.view(), logits.view(), topk, f);
    const LossRun run = run_aux_loss(logits, counts, s, topk, coeff, f, 1.0f);
    Vec x = to_double(logits);
    auto ref = [&] {
      const AuxScores a = aux_scores_ref(x, tokens, experts, topk, f);
      double sum = 0.0;
      for (int64_t j = 0; j < b; ++j) {
        std::vector<int64_t> mine;
        Vec cnt(experts, 0.0);
        for (int64_t i = 0; i < s; ++i) mine.push_back(i * b + j);
        for (int64_t t : mine) for (int e : a.top[t]) cnt[e] += 1;
        sum += switch_loss_ref(a.scores, mine, experts, cnt, s, topk, coeff);
      }
      return sum / b;
    };
    const double want = ref();
    EXPECT_NEAR(run.loss, want, 1e-6 * want);
    expect_close(run.dlogits.data(), fd_ref(x, ref), 1e-9, 1e-5, "dlogits");
  }
}

// global_aux_loss: counts summed over the data-parallel ranks and averaged over the micro-batches
// of the global batch so far; N is the tokens of one micro-batch on all ranks.
TEST(MoeRouterLoss, GlobalAuxLossUsesTheRunningMeanOfGlobalCounts) {
  const int64_t tokens = 16, experts = 8, topk = 2, dp = 2, micro_batches = 3;
  const double coeff = 0.01;
  Vec running(experts, 0.0);
  for (int64_t m = 0; m < micro_batches; ++m) {
    std::vector<HostTensor> logits, scores;
    HostTensor global = zeros({1, experts});
    for (int64_t r = 0; r < dp; ++r) {
      logits.push_back(randn({tokens, experts}, 371 + 10 * m + r, 1.5f));
      if (m == 2) for (int64_t t = 0; t < tokens; ++t) logits[r].f32()[t * experts + 5] += 2.0f;  // a skewed step
      scores.push_back(zeros({tokens, experts}));
      HostTensor c = zeros({1, experts});
      moe_aux_scores_fwd(scores[r].view(), c.view(), logits[r].view(), topk, MoeScoreFunction::sigmoid);
      for (int64_t e = 0; e < experts; ++e) global.f32()[e] += c.f32()[e];  // all-reduce over tp×dp×cp
    }
    HostTensor mean = zeros({1, experts});
    for (int64_t e = 0; e < experts; ++e) {
      running[e] += global.f32()[e];
      mean.f32()[e] = static_cast<float>(running[e] / (m + 1));
    }
    // Rank 0's loss and gradient, against the formula with the running mean's f_i.
    const LossRun run = run_aux_loss(logits[0], mean, tokens * dp, topk, coeff, MoeScoreFunction::sigmoid, 1.0f);
    Vec x = to_double(logits[0]);
    Vec mean_ref(experts);
    for (int64_t e = 0; e < experts; ++e) mean_ref[e] = running[e] / (m + 1);
    std::vector<int64_t> all(tokens);
    std::iota(all.begin(), all.end(), 0);
    auto ref = [&] {
      return switch_loss_ref(aux_scores_ref(x, tokens, experts, topk, MoeScoreFunction::sigmoid).scores, all, experts,
                             mean_ref, tokens * dp, topk, coeff);
    };
    const double want = ref();
    EXPECT_NEAR(run.loss, want, 1e-6 * want) << "micro-batch " << m;
    expect_close(run.dlogits.data(), fd_ref(x, ref), 1e-9, 1e-5, "dlogits");
  }
}

TEST(MoeRouterLoss, ZLossMatchesReferenceAndFiniteDifferences) {
  const int64_t tokens = 24, experts = 16;
  const double coeff = 1e-3;
  const float dloss = 2.0f;
  HostTensor logits = randn({tokens, experts}, 381, 3.0f), loss = zeros({1});
  moe_z_loss_fwd(loss.view(), logits.view(), coeff);
  Vec x = to_double(logits);
  auto ref = [&] {
    double sum = 0.0;
    for (int64_t t = 0; t < tokens; ++t) {
      double z = 0.0;
      for (int64_t e = 0; e < experts; ++e) z += std::exp(x[t * experts + e]);
      sum += std::log(z) * std::log(z);
    }
    return coeff * sum / tokens;
  };
  const double want = ref();
  EXPECT_NEAR(loss.f32()[0], want, 1e-6 * want);
  HostTensor dlogits = randn({tokens, experts}, 382, 1e-2f);  // small prior: the gradient is ~1e-4
  const std::vector<float> before = values(dlogits);
  moe_z_loss_bwd(dlogits.view(), dloss, logits.view(), coeff);
  Vec fd = fd_ref(x, ref);
  for (double& g : fd) g *= dloss;
  expect_close(added(dlogits, before).data(), fd, 1e-7, 1e-4, "dlogits");
}

// ---- Expert bias ----

TEST(MoeRouterBias, UpdateFollowsTheSignRule) {
  const int64_t layers = 2, experts = 4;
  HostTensor bias = randn({layers, experts}, 391, 0.01f), counts = zeros({layers, experts});
  // Layer 0: mean 4, so experts 0 and 3 sit exactly on it and stay. Layer 1: mean 2.5.
  const float c[] = {4, 2, 6, 4, 0, 1, 9, 0};
  std::copy(c, c + layers * experts, counts.f32());
  const std::vector<float> before = values(bias);
  const float rate = 1e-3f;
  moe_expert_bias_update(bias.view(), counts.view(), rate);
  const float sign[] = {0, 1, -1, 0, 1, 1, -1, 1};
  for (int64_t i = 0; i < layers * experts; ++i) EXPECT_EQ(bias.f32()[i], before[i] + sign[i] * rate) << "entry " << i;
}

// The routing the bias steers: with a large bias on one expert it is chosen by every token, yet its
// weight is its unbiased share.
TEST(MoeRouterBias, BiasSteersSelectionNotWeights) {
  const int64_t tokens = 6, experts = 8;
  HostTensor logits = randn({tokens, experts}, 395), bias = zeros({experts});
  bias.f32()[6] = 5.0f;
  HostTensor probs = zeros({tokens, 2}), indices = zeros({tokens, 2}, DType::i32);
  MoeRouterOptions o;
  o.topk = 2;
  o.score_function = MoeScoreFunction::sigmoid;
  moe_router_fwd(probs.view(), indices.view(), logits.view(), bias.view(), TensorView(), o);
  for (int64_t t = 0; t < tokens; ++t) {
    ASSERT_EQ(indices.i32()[t * 2], 6) << "token " << t;
    const double s6 = sigmoid_ref(logits.f32()[t * experts + 6]);
    const double s2 = sigmoid_ref(logits.f32()[t * experts + indices.i32()[t * 2 + 1]]);
    EXPECT_NEAR(probs.f32()[t * 2], s6 / (s6 + s2), 1e-6);
  }
}

// ---- Refusals ----

TEST(MoeRouter, RefusesWhatMegatronRefuses) {
  HostTensor logits = randn({4, 8}, 401), bias = zeros({8});
  HostTensor probs1 = zeros({4, 1}), idx1 = zeros({4, 1}, DType::i32);
  HostTensor probs4 = zeros({4, 4}), idx4 = zeros({4, 4}, DType::i32);
  for (int64_t i = 0; i < 16; ++i) idx4.i32()[i] = static_cast<int32_t>(i % 4);
  MoeRouterOptions o;
  o.topk = 1;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs1.view(), idx1.view(), logits.view(), TensorView(), TensorView(), o); },
      "--moe-router-pre-softmax");
  o.pre_softmax = true;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs1.view(), idx1.view(), logits.view(), bias.view(), TensorView(), o); },
      "--moe-router-score-function sigmoid");
  o.topk = 4;
  o.num_groups = 3;
  o.group_topk = 1;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs4.view(), idx4.view(), logits.view(), TensorView(), TensorView(), o); },
      "--moe-router-num-groups 3");
  o.num_groups = 4;  // groups of 2, one group chosen: only 2 candidates for top-4
  expect_error_mentioning(
      [&] { moe_router_fwd(probs4.view(), idx4.view(), logits.view(), TensorView(), TensorView(), o); },
      "--moe-router-topk 4 is more than the 2 experts");
  o.num_groups = o.group_topk = 0;
  o.topk = 9;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs4.view(), idx4.view(), logits.view(), TensorView(), TensorView(), o); },
      "--moe-router-topk 9");
  HostTensor rp = zeros({4, 8}), map = zeros({4, 8}, DType::u8);
  const MoeCapacityOptions pad_only{std::nullopt, MoeDropPolicy::probs, true};
  expect_error_mentioning(
      [&] { moe_routing_map_fwd(rp.view(), map.view(), probs4.view(), idx4.view(), pad_only); },
      "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
  // Index values are checked where they are read.
  o.topk = 4;
  idx4.i32()[5] = 8;
  HostTensor dlogits = zeros({4, 8});
  expect_error_mentioning([&] { moe_router_bwd(dlogits.view(), probs4.view(), logits.view(), idx4.view(), o); },
                          "indices[1, 1] = 8");
  idx4.i32()[5] = idx4.i32()[4];
  expect_error_mentioning([&] { moe_router_bwd(dlogits.view(), probs4.view(), logits.view(), idx4.view(), o); },
                          "twice");
}

}  // namespace
}  // namespace mt::test
