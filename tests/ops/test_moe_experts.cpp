// Tests for ops/moe_experts.h: permute and unpermute against fp64 references (row order, counts,
// row→token index, the weighted combine and both backwards, with finite differences), the exact
// identity of permute ∘ identity experts ∘ unpermute (dropped tokens come back as zeros, padding
// slots add nothing), a routing made by the router ops with capacity and padding; the expert MLP
// (GeLU erf/tanh, SwiGLU) against an fp64 reference and finite differences, the grouped kernel
// against the per-expert loop (bit for bit on one thread, within fp32 rounding on several), empty
// and one-row experts; and the refusals.
#include "ops/moe_experts.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/moe_router.h"
#include "testing.h"

namespace mt::test {
namespace {

using Vec = std::vector<double>;

// ---- Routings built directly (so each case is exactly what it says) ----

struct RoutingSpec {
  int64_t tokens = 24, experts = 6, topk = 2;
  double drop_token = 0.0;    // a token loses every choice (capacity dropped it everywhere)
  double drop_choice = 0.0;   // a token loses one of its choices
  double pad = 0.0;           // an unchosen (token, expert) becomes a padding slot (map 1, prob 0)
  std::vector<int> unused;    // experts nobody chooses (empty groups)
  uint32_t seed = 1;
};

struct Routing {
  HostTensor map, probs;  // u8 [T, E], f32 [T, E]
};

// Each kept token picks k distinct experts with dyadic weights summing to exactly 1 (multiples of
// 1/256, the last one the remainder), so identity checks can demand exact equality.
Routing make_routing(const RoutingSpec& s) {
  Routing r{zeros({s.tokens, s.experts}, DType::u8), zeros({s.tokens, s.experts})};
  std::mt19937 gen(s.seed);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::vector<int> allowed;
  for (int e = 0; e < s.experts; ++e)
    if (std::find(s.unused.begin(), s.unused.end(), e) == s.unused.end()) allowed.push_back(e);
  for (int64_t t = 0; t < s.tokens; ++t) {
    std::vector<int> pool = allowed;
    std::shuffle(pool.begin(), pool.end(), gen);
    const bool dropped = u01(gen) < s.drop_token;
    const int64_t lose = u01(gen) < s.drop_choice ? static_cast<int64_t>(gen() % s.topk) : -1;
    int left = 256;
    for (int64_t j = 0; j < s.topk; ++j) {
      const int c = j + 1 < s.topk ? 1 + static_cast<int>(gen() % (256 / s.topk - 1)) : left;
      left -= c;
      if (dropped || j == lose) continue;
      r.map.u8()[t * s.experts + pool[j]] = 1;
      r.probs.f32()[t * s.experts + pool[j]] = c / 256.0f;
    }
    for (int64_t e : allowed)
      if (!r.map.u8()[t * s.experts + e] && u01(gen) < s.pad) r.map.u8()[t * s.experts + e] = 1;
  }
  return r;
}

struct Permuted {
  HostTensor rows, row_token, counts;
};

Permuted permute(HostTensor& tokens, Routing& r) {
  const int64_t rows = moe_permuted_rows(r.map.view());
  Permuted p{zeros({rows, tokens.shape[1]}), zeros({rows}, DType::i32), zeros({r.map.shape[1]}, DType::i32)};
  moe_permute_fwd(p.rows.view(), p.row_token.view(), p.counts.view(), tokens.view(), r.map.view());
  return p;
}

// Megatron's order written out: expert by expert, tokens ascending; each row's token or expert.
std::vector<int32_t> rows_ref(Routing& r, bool expert) {
  std::vector<int32_t> out;
  for (int64_t e = 0; e < r.map.shape[1]; ++e)
    for (int64_t t = 0; t < r.map.shape[0]; ++t)
      if (r.map.u8()[t * r.map.shape[1] + e]) out.push_back(static_cast<int32_t>(expert ? e : t));
  return out;
}

TEST(MoeExperts, PermuteOrdersRowsByExpertThenToken) {
  RoutingSpec s;
  s.drop_choice = 0.2;
  s.drop_token = 0.1;
  s.pad = 0.1;
  s.unused = {3};
  Routing r = make_routing(s);
  HostTensor tokens = randn({s.tokens, 10}, 2);
  Permuted p = permute(tokens, r);
  const std::vector<int32_t> idx = rows_ref(r, /*expert=*/false);
  ASSERT_EQ(p.rows.shape[0], static_cast<int64_t>(idx.size()));
  for (size_t i = 0; i < idx.size(); ++i) {
    ASSERT_EQ(p.row_token.i32()[i], idx[i]) << "row " << i;
    EXPECT_EQ(std::memcmp(p.rows.f32() + i * 10, tokens.f32() + idx[i] * 10, 10 * sizeof(float)), 0) << "row " << i;
  }
  for (int64_t e = 0; e < s.experts; ++e) {
    int32_t n = 0;
    for (int64_t t = 0; t < s.tokens; ++t) n += r.map.u8()[t * s.experts + e];
    EXPECT_EQ(p.counts.i32()[e], n) << "expert " << e;
  }
  EXPECT_EQ(p.counts.i32()[3], 0);
}

TEST(MoeExperts, PermuteBackwardScatterAddsRows) {
  RoutingSpec s;
  s.topk = 3;
  s.drop_choice = 0.3;
  s.pad = 0.2;
  Routing r = make_routing(s);
  HostTensor tokens = randn({s.tokens, 7}, 3);
  Permuted p = permute(tokens, r);
  HostTensor drows = randn(p.rows.shape, 4), dtokens = randn(tokens.shape, 5);
  Vec ref = to_double(dtokens);
  for (int64_t i = 0; i < p.rows.shape[0]; ++i)
    for (int64_t c = 0; c < 7; ++c) ref[p.row_token.i32()[i] * 7 + c] += drows.f32()[i * 7 + c];
  moe_permute_bwd(dtokens.view(), drows.view(), p.row_token.view());
  // A few f32 additions per element: a handful of ulps.
  expect_close(dtokens.f32(), ref, 1e-6, 1e-6, "dtokens");
}

// out[t] = Σ p_r rows[r]; drows = p·dout; dprobs[t, e] = rows[r]·dout[t].
struct UnpermuteRef {
  Vec out, drows, dprobs;
};
UnpermuteRef unpermute_ref(Permuted& p, Routing& r, HostTensor& rows, HostTensor& dout, const Vec& drows0,
                           const Vec& dprobs0) {
  const int64_t t_count = r.map.shape[0], experts = r.map.shape[1], h = rows.shape[1];
  const std::vector<int32_t> ex = rows_ref(r, /*expert=*/true);
  UnpermuteRef ref{Vec(t_count * h, 0.0), drows0, dprobs0};
  for (int64_t i = 0; i < rows.shape[0]; ++i) {
    const int64_t t = p.row_token.i32()[i], e = ex[i];
    const double w = r.probs.f32()[t * experts + e];
    double dot = 0.0;
    for (int64_t c = 0; c < h; ++c) {
      ref.out[t * h + c] += w * rows.f32()[i * h + c];
      ref.drows[i * h + c] += w * dout.f32()[t * h + c];
      dot += static_cast<double>(rows.f32()[i * h + c]) * dout.f32()[t * h + c];
    }
    ref.dprobs[t * experts + e] += dot;
  }
  return ref;
}

TEST(MoeExperts, UnpermuteMatchesFp64ReferenceAndFiniteDifferences) {
  RoutingSpec s;
  s.tokens = 12;
  s.experts = 5;
  s.topk = 2;
  s.drop_choice = 0.25;
  s.pad = 0.15;
  Routing r = make_routing(s);
  // Non-dyadic weights here: the reference must hold for any probabilities.
  HostTensor noise = randn(r.probs.shape, 6, 0.1f);
  for (int64_t i = 0; i < r.probs.numel(); ++i)
    if (r.probs.f32()[i] != 0.0f) r.probs.f32()[i] += noise.f32()[i];
  HostTensor tokens = randn({s.tokens, 6}, 7);
  Permuted p = permute(tokens, r);
  HostTensor rows = randn(p.rows.shape, 8);  // the experts' output
  HostTensor out = zeros(tokens.shape), dout = randn(tokens.shape, 9);
  HostTensor drows = randn(rows.shape, 10), dprobs = randn(r.probs.shape, 11);
  const Vec drows0 = to_double(drows), dprobs0 = to_double(dprobs);
  moe_unpermute_fwd(out.view(), rows.view(), p.row_token.view(), p.counts.view(), r.probs.view());
  moe_unpermute_bwd(drows.view(), dprobs.view(), dout.view(), rows.view(), p.row_token.view(), p.counts.view(),
                    r.probs.view());
  const UnpermuteRef ref = unpermute_ref(p, r, rows, dout, drows0, dprobs0);
  expect_close(out.f32(), ref.out, 1e-6, 1e-6, "out");
  expect_close(drows.f32(), ref.drows, 1e-6, 1e-6, "drows");
  expect_close(dprobs.f32(), ref.dprobs, 1e-6, 1e-6, "drouting_probs");

  // Finite differences of Σ out·dout (linear in rows and in the probabilities: only f32 rounding of
  // the perturbed terms, ~1e-7 / 2h).
  auto loss = [&] {
    moe_unpermute_fwd(out.view(), rows.view(), p.row_token.view(), p.counts.view(), r.probs.view());
    return weighted_sum(out.f32(), dout.f32(), out.numel());
  };
  Vec fd_rows = finite_difference(rows, loss), fd_probs = finite_difference(r.probs, loss);
  for (size_t i = 0; i < fd_rows.size(); ++i) fd_rows[i] += drows0[i];
  // Entries without a row have no gradient (their probability is not read).
  for (int64_t i = 0; i < r.probs.numel(); ++i) fd_probs[i] = r.map.u8()[i] ? fd_probs[i] + dprobs0[i] : dprobs0[i];
  expect_close(drows.f32(), fd_rows, 1e-4, 1e-4, "drows vs finite differences");
  expect_close(dprobs.f32(), fd_probs, 1e-4, 1e-4, "drouting_probs vs finite differences");
}

TEST(MoeExperts, UnpermuteWithoutProbsSumsRows) {
  RoutingSpec s;
  s.topk = 3;
  Routing r = make_routing(s);
  HostTensor tokens = randn({s.tokens, 5}, 12);
  Permuted p = permute(tokens, r);
  HostTensor out = zeros(tokens.shape);
  moe_unpermute_fwd(out.view(), p.rows.view(), p.row_token.view(), p.counts.view(), TensorView());
  Vec ref(tokens.numel());
  for (int64_t i = 0; i < tokens.numel(); ++i) ref[i] = 3.0 * tokens.f32()[i];
  expect_close(out.f32(), ref, 1e-6, 1e-6, "Σ rows");
}

// Values rounded to multiples of 1/64: with weights c/256 (c < 256) every product and partial sum
// then fits in f32's 24 bits, so the identity below is exact, not merely close.
void coarsen(HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::round(t.f32()[i] * 64.0f) / 64.0f;
}

// permute → identity experts → unpermute with dyadic weights summing to 1: out = tokens bit for
// bit, dropped tokens 0; backward: dtokens = dout, dropped tokens 0.
void check_identity(const RoutingSpec& s) {
  Routing r = make_routing(s);
  const int64_t h = 9;
  HostTensor tokens = randn({s.tokens, h}, 13), dout = randn({s.tokens, h}, 14);
  coarsen(tokens);
  coarsen(dout);
  Permuted p = permute(tokens, r);
  HostTensor out = randn(tokens.shape, 15);  // garbage: the forward overwrites
  moe_unpermute_fwd(out.view(), p.rows.view(), p.row_token.view(), p.counts.view(), r.probs.view());
  HostTensor drows = zeros(p.rows.shape), dtokens = zeros(tokens.shape);
  moe_unpermute_bwd(drows.view(), TensorView(), dout.view(), p.rows.view(), p.row_token.view(), p.counts.view(),
                    r.probs.view());
  moe_permute_bwd(dtokens.view(), drows.view(), p.row_token.view());
  int64_t dropped = 0;
  for (int64_t t = 0; t < s.tokens; ++t) {
    float kept = 0.0f;
    for (int64_t e = 0; e < s.experts; ++e) kept += r.probs.f32()[t * s.experts + e];
    ASSERT_TRUE(kept == 0.0f || kept == 1.0f) << "the case must keep or drop whole tokens";
    dropped += kept == 0.0f;
    for (int64_t c = 0; c < h; ++c) {
      const float want = kept * tokens.f32()[t * h + c], dwant = kept * dout.f32()[t * h + c];
      ASSERT_EQ(out.f32()[t * h + c], want) << "token " << t << " column " << c;
      ASSERT_EQ(dtokens.f32()[t * h + c], dwant) << "token " << t << " column " << c;
    }
  }
  if (s.drop_token > 0) {
    EXPECT_GT(dropped, 0) << "the case was meant to drop tokens";
  }
}

TEST(MoeExperts, PermuteUnpermuteIsIdentity) { check_identity({}); }
TEST(MoeExperts, PermuteUnpermuteIsIdentityTopFour) {
  RoutingSpec s;
  s.tokens = 40, s.experts = 8, s.topk = 4, s.unused = {0, 5};
  check_identity(s);
}
TEST(MoeExperts, PermuteUnpermuteIsIdentityWithDroppedTokens) {
  RoutingSpec s;
  s.drop_token = 0.3;
  check_identity(s);
}
TEST(MoeExperts, PermuteUnpermuteIsIdentityWithPaddingSlots) {
  RoutingSpec s;
  s.drop_token = 0.2, s.pad = 0.3;
  check_identity(s);
}

// A routing from the router ops: position-policy capacity with padding (every expert exactly C
// rows, some of them padding). The combine gives each token (Σ of its kept weights)·token.
TEST(MoeExperts, PermuteUnpermuteWithRouterCapacityAndPadding) {
  const int64_t tokens = 32, experts = 8, h = 6;
  MoeRouterOptions ro;
  ro.topk = 2;
  HostTensor logits = randn({tokens, experts}, 16, 2.0f), probs = zeros({tokens, 2}), idx = zeros({tokens, 2}, DType::i32);
  moe_router_fwd(probs.view(), idx.view(), logits.view(), TensorView(), TensorView(), ro);
  MoeCapacityOptions cap;
  cap.capacity_factor = 0.75;
  cap.drop_policy = MoeDropPolicy::position;
  cap.pad_to_capacity = true;
  Routing r{zeros({tokens, experts}, DType::u8), zeros({tokens, experts})};
  moe_routing_map_fwd(r.probs.view(), r.map.view(), probs.view(), idx.view(), cap);
  const int64_t c = moe_expert_capacity(tokens, experts, 2, 0.75);
  HostTensor x = randn({tokens, h}, 17);
  Permuted p = permute(x, r);
  ASSERT_EQ(p.rows.shape[0], c * experts);
  for (int64_t e = 0; e < experts; ++e) EXPECT_EQ(p.counts.i32()[e], c);
  HostTensor out = zeros(x.shape);
  moe_unpermute_fwd(out.view(), p.rows.view(), p.row_token.view(), p.counts.view(), r.probs.view());
  Vec ref(x.numel());
  int64_t partly = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    double kept = 0.0;
    for (int64_t e = 0; e < experts; ++e) kept += r.probs.f32()[t * experts + e];
    partly += kept < probs.f32()[t * 2] + probs.f32()[t * 2 + 1] - 1e-6;
    for (int64_t j = 0; j < h; ++j) ref[t * h + j] = kept * x.f32()[t * h + j];
  }
  EXPECT_GT(partly, 0) << "capacity 0.75 was meant to drop some choices";
  expect_close(out.f32(), ref, 1e-6, 1e-6, "combine under capacity and padding");
}

// ---- The expert MLP ----

struct MlpCase {
  std::vector<int32_t> counts;
  int64_t hidden, ffn;
  MoeExpertsOptions options;
};

int64_t fc1_rows(const MlpCase& c) {
  return c.options.activation == MoeExpertActivation::swiglu ? 2 * c.ffn : c.ffn;
}

struct MlpTensors {
  HostTensor counts, inp, w1, w2, out, pre, act, dout, dinp, dw1, dw2, dact, dpre;
};

MlpTensors make_mlp(const MlpCase& c, uint64_t seed) {
  const int64_t e = static_cast<int64_t>(c.counts.size()), f1 = fc1_rows(c);
  int64_t rows = 0;
  for (int32_t n : c.counts) rows += n;
  MlpTensors m;
  m.counts = zeros({e}, DType::i32);
  std::copy(c.counts.begin(), c.counts.end(), m.counts.i32());
  m.inp = randn({rows, c.hidden}, seed);
  // Megatron-like init scale (std 1/√fan_in): activations stay O(1) at any width.
  m.w1 = randn({e, f1, c.hidden}, seed + 1, 1.0f / std::sqrt(static_cast<float>(c.hidden)));
  m.w2 = randn({e, c.hidden, c.ffn}, seed + 2, 1.0f / std::sqrt(static_cast<float>(c.ffn)));
  m.out = zeros({rows, c.hidden});
  m.pre = zeros({rows, f1});
  m.act = zeros({rows, c.ffn});
  m.dout = randn({rows, c.hidden}, seed + 3);
  m.dinp = randn({rows, c.hidden}, seed + 4);  // nonzero: the op must accumulate
  m.dw1 = randn(m.w1.shape, seed + 5);
  m.dw2 = randn(m.w2.shape, seed + 6);
  m.dact = randn({rows, c.ffn}, seed + 7);  // garbage scratch: the op must overwrite
  m.dpre = randn({rows, f1}, seed + 8);
  return m;
}

void run_fwd(MlpTensors& m, const MoeExpertsOptions& o) {
  moe_experts_fwd(m.out.view(), m.pre.view(), m.act.view(), m.inp.view(), m.counts.view(), m.w1.view(), m.w2.view(),
                  o);
}
void run_bwd(MlpTensors& m, const MoeExpertsOptions& o) {
  moe_experts_bwd(m.dinp.view(), m.dw1.view(), m.dw2.view(), m.dout.view(), m.inp.view(), m.pre.view(),
                  m.counts.view(), m.w1.view(), m.w2.view(), m.act.view(), m.dact.view(), m.dpre.view(), o);
}

// ---- fp64 reference ----

double phi_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
constexpr double kC = 0.7978845608028654;  // √(2/π)

double act_ref(double x, PointwiseActivation f) {
  if (f == PointwiseActivation::gelu) return x * phi_cdf(x);
  return 0.5 * x * (1.0 + std::tanh(kC * (x + 0.044715 * x * x * x)));
}
double act_grad_ref(double x, PointwiseActivation f) {
  if (f == PointwiseActivation::gelu) return phi_cdf(x) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  const double th = std::tanh(kC * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kC * (1.0 + 3.0 * 0.044715 * x * x);
}

struct MlpRef {
  Vec out, dinp, dw1, dw2;
};

// Per row of expert e: pre = W1 x, act = f(pre), y = W2 act; and the chain rule back, accumulated
// onto the start gradients.
MlpRef mlp_ref(const MlpCase& c, MlpTensors& m, const Vec& dinp0, const Vec& dw10, const Vec& dw20) {
  const int64_t h = c.hidden, ffn = c.ffn, f1 = fc1_rows(c);
  const bool glu = c.options.activation == MoeExpertActivation::swiglu;
  MlpRef ref{Vec(m.out.numel(), 0.0), dinp0, dw10, dw20};
  int64_t r = 0;
  for (size_t e = 0; e < c.counts.size(); ++e)
    for (int32_t i = 0; i < c.counts[e]; ++i, ++r) {
      const float* x = m.inp.f32() + r * h;
      const float* w1 = m.w1.f32() + e * f1 * h;
      const float* w2 = m.w2.f32() + e * h * ffn;
      const float* dy = m.dout.f32() + r * h;
      Vec pre(f1, 0.0), act(ffn), dact(ffn, 0.0), dpre(f1);
      for (int64_t o = 0; o < f1; ++o)
        for (int64_t k = 0; k < h; ++k) pre[o] += static_cast<double>(w1[o * h + k]) * x[k];
      for (int64_t j = 0; j < ffn; ++j) {
        if (glu) {
          const double g = pre[j], s = 1.0 / (1.0 + std::exp(-g));
          act[j] = g * s * pre[ffn + j];
        } else {
          act[j] = act_ref(pre[j], c.options.pointwise);
        }
      }
      for (int64_t o = 0; o < h; ++o) {
        for (int64_t j = 0; j < ffn; ++j) {
          ref.out[r * h + o] += static_cast<double>(w2[o * ffn + j]) * act[j];
          dact[j] += static_cast<double>(w2[o * ffn + j]) * dy[o];
          ref.dw2[e * h * ffn + o * ffn + j] += dy[o] * act[j];
        }
      }
      for (int64_t j = 0; j < ffn; ++j) {
        if (glu) {
          const double g = pre[j], u = pre[ffn + j], s = 1.0 / (1.0 + std::exp(-g));
          dpre[j] = dact[j] * u * s * (1.0 + g * (1.0 - s));
          dpre[ffn + j] = dact[j] * g * s;
        } else {
          dpre[j] = dact[j] * act_grad_ref(pre[j], c.options.pointwise);
        }
      }
      for (int64_t o = 0; o < f1; ++o)
        for (int64_t k = 0; k < h; ++k) {
          ref.dinp[r * h + k] += dpre[o] * w1[o * h + k];
          ref.dw1[e * f1 * h + o * h + k] += dpre[o] * x[k];
        }
    }
  return ref;
}

MoeExpertsOptions opts(MoeExpertActivation a, PointwiseActivation f, MoeExpertsImpl impl) {
  MoeExpertsOptions o;
  o.activation = a;
  o.pointwise = f;
  o.impl = impl;
  return o;
}

// Both implementations against the fp64 reference, forward and backward, and the backward against
// central differences of Σ out·dout. Counts include an empty expert and a one-row expert.
void check_mlp_reference(MoeExpertActivation a, PointwiseActivation f) {
  for (MoeExpertsImpl impl : {MoeExpertsImpl::sequential, MoeExpertsImpl::grouped}) {
    SCOPED_TRACE(impl == MoeExpertsImpl::grouped ? "grouped" : "sequential");
    MlpCase c{{3, 0, 5, 1}, 6, 5, opts(a, f, impl)};
    MlpTensors m = make_mlp(c, 20);
    const Vec dinp0 = to_double(m.dinp), dw10 = to_double(m.dw1), dw20 = to_double(m.dw2);
    run_fwd(m, c.options);
    run_bwd(m, c.options);
    const MlpRef ref = mlp_ref(c, m, dinp0, dw10, dw20);
    // Sums of ≤ 10 unit-scale f32 products and the activation kernels' ~1e-7 relative error.
    expect_close(m.out.f32(), ref.out, 1e-5, 1e-5, "out");
    expect_close(m.dinp.f32(), ref.dinp, 1e-5, 1e-5, "dinp");
    expect_close(m.dw1.f32(), ref.dw1, 1e-5, 1e-5, "dweight1");
    expect_close(m.dw2.f32(), ref.dw2, 1e-5, 1e-5, "dweight2");
    // The empty expert's gradients are untouched.
    const int64_t f1 = fc1_rows(c);
    for (int64_t i = 0; i < f1 * c.hidden; ++i) ASSERT_EQ(m.dw1.f32()[f1 * c.hidden + i], dw10[f1 * c.hidden + i]);

    // Finite differences: the loss is smooth; h = 1e-2 leaves O(h²·f''') ≈ 1e-5 truncation and
    // ~1e-5 of f32 rounding in the loss, far below a wrong term (O(0.1)).
    auto loss = [&] {
      run_fwd(m, c.options);
      return weighted_sum(m.out.f32(), m.dout.f32(), m.out.numel());
    };
    Vec fd_inp = finite_difference(m.inp, loss), fd_w1 = finite_difference(m.w1, loss),
        fd_w2 = finite_difference(m.w2, loss);
    for (size_t i = 0; i < fd_inp.size(); ++i) fd_inp[i] += dinp0[i];
    for (size_t i = 0; i < fd_w1.size(); ++i) fd_w1[i] += dw10[i];
    for (size_t i = 0; i < fd_w2.size(); ++i) fd_w2[i] += dw20[i];
    expect_close(m.dinp.f32(), fd_inp, 2e-3, 2e-3, "dinp vs finite differences");
    expect_close(m.dw1.f32(), fd_w1, 2e-3, 2e-3, "dweight1 vs finite differences");
    expect_close(m.dw2.f32(), fd_w2, 2e-3, 2e-3, "dweight2 vs finite differences");
  }
}

TEST(MoeExperts, MlpGeluMatchesFp64ReferenceAndFiniteDifferences) {
  check_mlp_reference(MoeExpertActivation::pointwise, PointwiseActivation::gelu);
}
TEST(MoeExperts, MlpGeluTanhMatchesFp64ReferenceAndFiniteDifferences) {
  check_mlp_reference(MoeExpertActivation::pointwise, PointwiseActivation::gelu_tanh);
}
TEST(MoeExperts, MlpSwigluMatchesFp64ReferenceAndFiniteDifferences) {
  check_mlp_reference(MoeExpertActivation::swiglu, PointwiseActivation::gelu);
}

// Sets the OpenMP thread count for a scope (the suite runs with OMP_NUM_THREADS=1).
struct Threads {
  int saved = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved); }
};

// Grouped against the sequential loop on the same inputs (dinp skipped once, to cover that path).
void check_grouped_vs_sequential(MlpCase c, int threads, bool with_dinp) {
  Threads scope(threads);
  c.options.impl = MoeExpertsImpl::sequential;
  MlpTensors seq = make_mlp(c, 40);
  c.options.impl = MoeExpertsImpl::grouped;
  MlpTensors grp = make_mlp(c, 40);
  auto bwd = [&](MlpTensors& m, MoeExpertsImpl impl) {
    MoeExpertsOptions o = c.options;
    o.impl = impl;
    run_fwd(m, o);
    moe_experts_bwd(with_dinp ? m.dinp.view() : TensorView(), m.dw1.view(), m.dw2.view(), m.dout.view(),
                    m.inp.view(), m.pre.view(), m.counts.view(), m.w1.view(), m.w2.view(), m.act.view(),
                    m.dact.view(), m.dpre.view(), o);
  };
  bwd(seq, MoeExpertsImpl::sequential);
  bwd(grp, MoeExpertsImpl::grouped);
  if (threads == 1) {
    // One thread: the same BLAS calls per expert, so the same bits.
    auto same = [&](HostTensor& a, HostTensor& b, const char* what) {
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_EQ(a.f32()[i], b.f32()[i]) << what << " element " << i << " differs (one thread)";
    };
    same(grp.out, seq.out, "out");
    same(grp.pre, seq.pre, "pre_act");
    if (with_dinp) same(grp.dinp, seq.dinp, "dinp");
    same(grp.dw1, seq.dw1, "dweight1");
    same(grp.dw2, seq.dw2, "dweight2");
    return;
  }
  // Several threads: tiles (and OpenBLAS's own threading in the loop) may change a dot product's
  // summation order. Two orders of a K-term f32 sum differ by at most ~2·K·2⁻²⁴·Σ|terms|; allow
  // twice that for the rounding carried in from the rows' own products. Rows: K ≤ 96 terms of O(1).
  expect_close(grp.out.f32(), to_double(seq.out), 1e-5, 1e-5, "out");
  expect_close(grp.pre.f32(), to_double(seq.pre), 1e-5, 1e-5, "pre_act");
  if (with_dinp) expect_close(grp.dinp.f32(), to_double(seq.dinp), 1e-5, 1e-5, "dinp");
  // Weight gradients sum over an expert's rows (up to 700 here): bound each element by its own
  // Σ_r |dy[r, o]|·|x[r, i]|.
  auto check_dw = [&](HostTensor& got, HostTensor& want, const float* dy, int64_t o_dim, const float* x,
                      int64_t i_dim, const char* what) {
    int64_t r0 = 0;
    for (size_t e = 0; e < c.counts.size(); r0 += c.counts[e++]) {
      const int64_t n = c.counts[e];
      for (int64_t o = 0; o < o_dim; ++o)
        for (int64_t i = 0; i < i_dim; ++i) {
          double scale = 0.0;
          for (int64_t r = r0; r < r0 + n; ++r) scale += std::fabs(dy[r * o_dim + o]) * std::fabs(x[r * i_dim + i]);
          const int64_t at = (static_cast<int64_t>(e) * o_dim + o) * i_dim + i;
          const double bound = 4.0 * static_cast<double>(n) * 0x1p-24 * scale + 1e-7;
          ASSERT_LE(std::fabs(static_cast<double>(got.f32()[at]) - want.f32()[at]), bound)
              << what << " expert " << e << " [" << o << ", " << i << "]";
        }
    }
  };
  const int64_t f1 = fc1_rows(c);
  check_dw(grp.dw2, seq.dw2, seq.dout.f32(), c.hidden, seq.act.f32(), c.ffn, "dweight2");
  check_dw(grp.dw1, seq.dw1, seq.dpre.f32(), f1, seq.inp.f32(), c.hidden, "dweight1");
}

// Skewed: one expert with most rows, two empty, one with one row (the GEMV path).
MlpCase skewed(MoeExpertActivation a) {
  return {{700, 0, 33, 1, 130, 0, 64, 90}, 64, 48, opts(a, PointwiseActivation::gelu, MoeExpertsImpl::grouped)};
}

TEST(MoeExperts, GroupedEqualsSequentialBitForBitOnOneThread) {
  check_grouped_vs_sequential(skewed(MoeExpertActivation::pointwise), 1, true);
  check_grouped_vs_sequential(skewed(MoeExpertActivation::swiglu), 1, true);
  check_grouped_vs_sequential(skewed(MoeExpertActivation::swiglu), 1, false);
}

TEST(MoeExperts, GroupedEqualsSequentialOnSeveralThreads) {
  check_grouped_vs_sequential(skewed(MoeExpertActivation::pointwise), 4, true);
  check_grouped_vs_sequential(skewed(MoeExpertActivation::swiglu), 3, false);
}

TEST(MoeExperts, AllExpertsEmptyButOne) {
  for (MoeExpertsImpl impl : {MoeExpertsImpl::sequential, MoeExpertsImpl::grouped}) {
    MlpCase c{{0, 0, 4, 0}, 8, 6, opts(MoeExpertActivation::swiglu, PointwiseActivation::gelu, impl)};
    MlpTensors m = make_mlp(c, 60);
    const Vec dinp0 = to_double(m.dinp), dw10 = to_double(m.dw1), dw20 = to_double(m.dw2);
    run_fwd(m, c.options);
    run_bwd(m, c.options);
    const MlpRef ref = mlp_ref(c, m, dinp0, dw10, dw20);
    expect_close(m.out.f32(), ref.out, 1e-5, 1e-5, "out");
    expect_close(m.dw1.f32(), ref.dw1, 1e-5, 1e-5, "dweight1");
    expect_close(m.dw2.f32(), ref.dw2, 1e-5, 1e-5, "dweight2");
  }
}

TEST(MoeExperts, NoRowsAtAll) {
  MlpCase c{{0, 0}, 8, 6, opts(MoeExpertActivation::pointwise, PointwiseActivation::gelu, MoeExpertsImpl::grouped)};
  MlpTensors m = make_mlp(c, 61);
  const Vec dw10 = to_double(m.dw1);
  run_fwd(m, c.options);
  run_bwd(m, c.options);
  for (int64_t i = 0; i < m.dw1.numel(); ++i) ASSERT_EQ(m.dw1.f32()[i], dw10[i]) << "dweight1 changed at " << i;
}

TEST(MoeExperts, BadInputsThrow) {
  MlpCase c{{2, 3}, 4, 3, opts(MoeExpertActivation::pointwise, PointwiseActivation::gelu, MoeExpertsImpl::grouped)};
  MlpTensors m = make_mlp(c, 70);
  m.counts.i32()[0] = 3;  // sums to 6, inp has 5 rows
  expect_error_mentioning([&] { run_fwd(m, c.options); }, "sums to 6");
  m.counts.i32()[0] = -1;
  m.counts.i32()[1] = 6;
  expect_error_mentioning([&] { run_fwd(m, c.options); }, "negative");
  m.counts.i32()[0] = 2;
  m.counts.i32()[1] = 3;
  // GeLU weights under SwiGLU: fc1 needs 2·ffn rows.
  expect_error_mentioning([&] { run_fwd(m, opts(MoeExpertActivation::swiglu, PointwiseActivation::gelu, MoeExpertsImpl::grouped)); },
                          "2·ffn");
  Routing r = make_routing({});
  HostTensor tokens = randn({24, 4}, 71), rows = zeros({5, 4}), idx = zeros({5}, DType::i32),
             counts = zeros({6}, DType::i32);
  expect_error_mentioning(
      [&] { moe_permute_fwd(rows.view(), idx.view(), counts.view(), tokens.view(), r.map.view()); }, "permuted rows");
  HostTensor out = zeros({24, 4});
  idx.i32()[2] = 24;
  counts.i32()[0] = 5;
  expect_error_mentioning(
      [&] { moe_unpermute_fwd(out.view(), rows.view(), idx.view(), counts.view(), r.probs.view()); }, "row_token[2]");
}

}  // namespace
}  // namespace mt::test
