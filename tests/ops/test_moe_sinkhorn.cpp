// Tests for Sinkhorn routing (ops/moe_router.h: moe_sinkhorn_fwd, and moe_router_fwd/bwd with
// options.sinkhorn) against an fp64 reference of Megatron's moe_utils.py::sinkhorn and
// router.py::sinkhorn_load_balancing written here with plain loops: the normalisation (and that it
// balances a skewed router, and couples the tokens), the training choice (top-k of the Sinkhorn
// scores) and the evaluation choice (top-k of σ or softmax), the weights (unnormalised σ for top-1,
// softmax otherwise), the backward against central differences, and the refusals.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/moe_router.h"
#include "testing.h"

namespace mt::test {
namespace {

using Vec = std::vector<double>;

// Megatron's sinkhorn() in double: d0, d1 from d1 = 1 until mean |Δd1| ≤ 1e-4.
Vec sinkhorn_ref(const Vec& x, int64_t tokens, int64_t experts) {
  Vec c(x.size()), d0(tokens), d1(experts, 1.0);
  for (size_t i = 0; i < x.size(); ++i) c[i] = std::exp(x[i]);
  for (double error = 1e9; error > 1e-4;) {
    for (int64_t t = 0; t < tokens; ++t) {
      double sum = 0.0;
      for (int64_t e = 0; e < experts; ++e) sum += d1[e] * c[t * experts + e];
      d0[t] = 1.0 / tokens / (sum + 1e-8);
    }
    error = 0.0;
    for (int64_t e = 0; e < experts; ++e) {
      double sum = 0.0;
      for (int64_t t = 0; t < tokens; ++t) sum += d0[t] * c[t * experts + e];
      const double next = 1.0 / experts / (sum + 1e-8);
      error += std::fabs(next - d1[e]) / experts;
      d1[e] = next;
    }
  }
  Vec scores(x.size());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < experts; ++e) scores[t * experts + e] = d0[t] * c[t * experts + e] * d1[e];
  return scores;
}

// The weights' activation of one row: σ for top-1, softmax otherwise.
Vec activation_ref(const double* x, int64_t experts, int64_t k) {
  Vec s(experts);
  if (k == 1) {
    for (int64_t e = 0; e < experts; ++e) s[e] = 1.0 / (1.0 + std::exp(-x[e]));
    return s;
  }
  const double mx = *std::max_element(x, x + experts);
  double sum = 0.0;
  for (int64_t e = 0; e < experts; ++e) sum += s[e] = std::exp(x[e] - mx);
  for (double& v : s) v /= sum;
  return s;
}

// The k best of v[0..n) (ties to the lower index), best first.
std::vector<int> top(const double* v, int64_t n, int64_t k) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[a] > v[b]; });
  order.resize(k);
  return order;
}

// Choices per expert of a top-1 routing.
std::vector<int> loads(const int32_t* idx, int64_t tokens, int64_t experts) {
  std::vector<int> n(experts, 0);
  for (int64_t t = 0; t < tokens; ++t) ++n[idx[t]];
  return n;
}

// Router-like logits where expert 0 is everyone's favourite, so plain top-k overloads it.
HostTensor skewed_logits(int64_t tokens, int64_t experts, uint64_t seed) {
  HostTensor x = randn({tokens, experts}, seed, 1.0f);
  for (int64_t t = 0; t < tokens; ++t) x.f32()[t * experts] += 1.5f;
  return x;
}

MoeRouterOptions sinkhorn_options(int64_t topk) {
  MoeRouterOptions o;
  o.topk = topk;
  o.sinkhorn = true;
  return o;
}

// Scores are ~1/(T·E); d0 and d1 are rounded to f32 at each iteration (6e-8 relative).
constexpr double kScoreRtol = 2e-5;
// Weights are O(1), computed in double and rounded once; a backward adds the rounding of its prior.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

TEST(MoeSinkhorn, MatchesReferenceAndBalances) {
  for (const int64_t experts : {int64_t{8}, int64_t{16}}) {
    const int64_t tokens = 64;
    SCOPED_TRACE("E " + std::to_string(experts));
    HostTensor logits = skewed_logits(tokens, experts, 501 + experts), scores = randn({tokens, experts}, 502);
    moe_sinkhorn_fwd(scores.view(), logits.view());
    const Vec ref = sinkhorn_ref(to_double(logits), tokens, experts);
    expect_close(scores.f32(), ref, 0.0, kScoreRtol, "scores");
    // The last column scaling makes every column sum to 1/E (up to eps); rows to about 1/T.
    for (int64_t e = 0; e < experts; ++e) {
      double col = 0.0;
      for (int64_t t = 0; t < tokens; ++t) col += scores.f32()[t * experts + e];
      EXPECT_NEAR(col * experts, 1.0, 1e-5) << "column " << e;
    }
    for (int64_t t = 0; t < tokens; ++t) {
      double row = 0.0;
      for (int64_t e = 0; e < experts; ++e) row += scores.f32()[t * experts + e];
      EXPECT_NEAR(row * tokens, 1.0, 1e-2) << "row " << t;
    }
    // What it is for: top-1 over the scores spreads the tokens that top-1 over σ piles on expert 0.
    HostTensor p = zeros({tokens, 1});
    HostTensor balanced = zeros({tokens, 1}, DType::i32), plain = zeros({tokens, 1}, DType::i32);
    moe_router_fwd(p.view(), balanced.view(), logits.view(), TensorView(), scores.view(), sinkhorn_options(1));
    moe_router_fwd(p.view(), plain.view(), logits.view(), TensorView(), TensorView(), sinkhorn_options(1));
    const std::vector<int> before = loads(plain.i32(), tokens, experts), after = loads(balanced.i32(), tokens, experts);
    const int most_before = *std::max_element(before.begin(), before.end());
    const int most_after = *std::max_element(after.begin(), after.end());
    EXPECT_GT(most_before, 3 * tokens / experts) << "the case must overload an expert";
    EXPECT_LE(most_after, 2 * tokens / experts);
  }
}

// Sinkhorn normalises over all the tokens it is given: half the micro-batch alone is scaled
// differently, which is why the model gathers the sequence shards' logits first.
TEST(MoeSinkhorn, CouplesAllTokens) {
  const int64_t tokens = 32, experts = 8;
  HostTensor logits = skewed_logits(tokens, experts, 511), whole = zeros({tokens, experts});
  HostTensor half = zeros({tokens / 2, experts});
  moe_sinkhorn_fwd(whole.view(), logits.view());
  moe_sinkhorn_fwd(half.view(), logits.view().rows(0, tokens / 2));
  double worst = 0.0;
  for (int64_t i = 0; i < tokens / 2 * experts; ++i)
    worst = std::max(worst, std::fabs(2.0 * half.f32()[i] / whole.f32()[i] - 1.0));  // half's rows sum to 2/T
  EXPECT_GT(worst, 1e-2);
}

struct SinkhornCase {
  int64_t topk, experts;
};

class MoeSinkhornRouting : public ::testing::TestWithParam<SinkhornCase> {
 protected:
  static constexpr int64_t kTokens = 40;
  SinkhornCase c = GetParam();
  MoeRouterOptions o = sinkhorn_options(c.topk);
  HostTensor logits = skewed_logits(kTokens, c.experts, 521 + c.topk);
  Vec x = to_double(logits);
  HostTensor probs = zeros({kTokens, c.topk}), indices = zeros({kTokens, c.topk}, DType::i32);

  // Training when `balanced`: the choice from the kernel's Sinkhorn scores.
  void forward(bool balanced) {
    HostTensor scores = zeros({kTokens, c.experts});
    if (balanced) moe_sinkhorn_fwd(scores.view(), logits.view());
    moe_router_fwd(probs.view(), indices.view(), logits.view(), TensorView(), balanced ? scores.view() : TensorView(),
                   o);
  }
  // The choice and weights Megatron makes, ranking by `select` [T, E] (Sinkhorn's or the activation).
  void expect_routing(const Vec& select) {
    Vec want(kTokens * c.topk);
    for (int64_t t = 0; t < kTokens; ++t) {
      const Vec s = activation_ref(x.data() + t * c.experts, c.experts, c.topk);
      const std::vector<int> chosen = top(select.data() + t * c.experts, c.experts, c.topk);
      for (int64_t j = 0; j < c.topk; ++j) {
        ASSERT_EQ(indices.i32()[t * c.topk + j], chosen[j]) << "token " << t << " choice " << j;
        want[t * c.topk + j] = s[chosen[j]];
      }
    }
    expect_close(probs.f32(), want, kAtol, kRtol, "probs");
  }
  Vec activations() const {
    Vec a(x.size());
    for (int64_t t = 0; t < kTokens; ++t) {
      const Vec s = activation_ref(x.data() + t * c.experts, c.experts, c.topk);
      std::copy(s.begin(), s.end(), a.begin() + t * c.experts);
    }
    return a;
  }
};

TEST_P(MoeSinkhornRouting, TrainingChoosesBySinkhornScores) {
  forward(true);
  const Vec balanced = sinkhorn_ref(x, kTokens, c.experts);
  expect_routing(balanced);
  // The balancing must change some choice here, or the case proves nothing about it.
  int moved = 0;
  const Vec plain = activations();
  for (int64_t t = 0; t < kTokens; ++t) {
    const int64_t at = t * c.experts;
    moved += top(balanced.data() + at, c.experts, c.topk) != top(plain.data() + at, c.experts, c.topk);
  }
  EXPECT_GT(moved, 0);
}

TEST_P(MoeSinkhornRouting, EvaluationChoosesByTheActivation) {
  forward(false);
  expect_routing(activations());
}

// Backward of Σ W·(scattered weights) with the choice fixed (Megatron selects without gradient):
// only the activation carries gradient, against central differences of the fp64 reference.
TEST_P(MoeSinkhornRouting, BackwardMatchesFiniteDifferences) {
  forward(true);
  const int64_t k = c.topk, n = c.experts;
  HostTensor w = randn({kTokens, n}, 523), dprobs = zeros({kTokens, k}), dlogits = randn({kTokens, n}, 524);
  for (int64_t i = 0; i < kTokens * k; ++i) dprobs.f32()[i] = w.f32()[(i / k) * n + indices.i32()[i]];
  std::vector<float> before(dlogits.f32(), dlogits.f32() + dlogits.numel());
  moe_router_bwd(dlogits.view(), dprobs.view(), logits.view(), indices.view(), o);
  Vec fd(x.size());
  const double h = 1e-5;
  auto loss = [&] {
    double s = 0.0;
    for (int64_t t = 0; t < kTokens; ++t) {
      const Vec a = activation_ref(x.data() + t * n, n, k);
      for (int64_t j = 0; j < k; ++j) {
        const int e = indices.i32()[t * k + j];
        s += w.f32()[t * n + e] * a[e];
      }
    }
    return s;
  };
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    fd[i] = (up - loss()) / (2 * h);
    x[i] = saved;
  }
  std::vector<float> added(before.size());
  for (size_t i = 0; i < added.size(); ++i) added[i] = dlogits.f32()[i] - before[i];
  expect_close(added.data(), fd, kAtol, kRtol, "dlogits");
  // Top-1 (σ) feeds only the chosen logit; softmax every logit of the row.
  int64_t touched = 0;
  for (size_t i = 0; i < fd.size(); ++i) touched += fd[i] != 0.0;
  EXPECT_EQ(touched, k == 1 ? kTokens : kTokens * n);
}

INSTANTIATE_TEST_SUITE_P(MoeSinkhorn, MoeSinkhornRouting,
                         ::testing::Values(SinkhornCase{1, 8}, SinkhornCase{2, 8}, SinkhornCase{4, 16}),
                         [](const ::testing::TestParamInfo<SinkhornCase>& info) {
                           return "Top" + std::to_string(info.param.topk) + "E" + std::to_string(info.param.experts);
                         });

TEST(MoeSinkhorn, RefusesWhatDoesNotApply) {
  HostTensor logits = randn({4, 8}, 531), scores = zeros({4, 8}), bias = zeros({8});
  HostTensor probs = zeros({4, 1}), idx = zeros({4, 1}, DType::i32);
  MoeRouterOptions o = sinkhorn_options(1);
  o.scaling_factor = 2.0f;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs.view(), idx.view(), logits.view(), TensorView(), TensorView(), o); },
      "--moe-router-topk-scaling-factor");
  o.scaling_factor = 0.0f;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs.view(), idx.view(), logits.view(), bias.view(), TensorView(), o); }, "expert bias");
  o.sinkhorn = false;
  o.pre_softmax = true;
  expect_error_mentioning(
      [&] { moe_router_fwd(probs.view(), idx.view(), logits.view(), TensorView(), scores.view(), o); },
      "do not route by Sinkhorn");
  expect_error_mentioning([&] { moe_sinkhorn_fwd(logits.view(), logits.view()); }, "must not alias");
  expect_error_mentioning([&] { moe_sinkhorn_fwd(zeros({4, 7}).view(), logits.view()); }, "scores");
}

}  // namespace
}  // namespace mt::test
