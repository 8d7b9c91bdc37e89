// Tests for ops/muon.h and optim/muon.h: the Newton–Schulz iteration against the same polynomial
// in double (f32) and with every bf16 rounding replayed in double (bf16); its result close to an
// orthogonal matrix; the coefficient schedules; the momentum and apply steps against their
// formulas; and one Optimizer step with Muon against the ops composed by hand (a plain matrix,
// the QKV split into Q, K and V, Adam for a bias and the word embedding).
#include <cmath>
#include <vector>

#include "base/error.h"
#include "ops/adamw.h"
#include "ops/elementwise.h"
#include "ops/muon.h"
#include "optim/optimizer.h"
#include "testing.h"

namespace mt {
namespace {

using test::HostTensor;
using test::randn;
using test::zeros;

double bf16_round(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

// The iteration of ops/muon.h in double, row-major x [r, c]; bf16: each product rounded as the op's.
std::vector<double> newton_schulz_reference(const float* x, int64_t r, int64_t c,
                                            const std::vector<NewtonSchulzStep>& steps, bool bf16) {
  const bool tr = r > c;
  const int64_t k = std::min(r, c), n = std::max(r, c);
  std::vector<double> X(k * n);
  double sum = 0;
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      (tr ? X[j * n + i] : X[i * n + j]) = x[i * c + j];
      sum += double(x[i * c + j]) * x[i * c + j];
    }
  const double norm = std::sqrt(sum);
  const auto round = [&](std::vector<double>& v) {
    if (bf16)
      for (double& e : v) e = bf16_round(e);
  };
  for (double& e : X) e /= norm;
  round(X);
  for (const NewtonSchulzStep& s : steps) {
    std::vector<double> A(k * k, 0.0), B(k * k, 0.0), Y(k * n, 0.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j)
        for (int64_t l = 0; l < n; ++l) A[i * k + j] += X[i * n + l] * X[j * n + l];
    round(A);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double aa = 0;
        for (int64_t l = 0; l < k; ++l) aa += A[i * k + l] * A[l * k + j];
        B[i * k + j] = s[1] * A[i * k + j] + s[2] * aa;
      }
    if (s[2] != 0.0f) round(B);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double bx = 0;
        for (int64_t l = 0; l < k; ++l) bx += B[i * k + l] * X[l * n + j];
        Y[i * n + j] = s[0] * X[i * n + j] + bx;
      }
    round(Y);
    X = Y;
  }
  std::vector<double> out(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = tr ? X[j * n + i] : X[i * n + j];
  return out;
}

HostTensor orthogonalized(HostTensor x, const std::vector<NewtonSchulzStep>& steps, bool bf16) {
  HostTensor ws = zeros({newton_schulz_workspace(x.shape[0], x.shape[1])});
  NewtonSchulzArgs args;
  args.steps = steps;
  args.bf16 = bf16;
  newton_schulz(x.view(), args, ws.view());
  return x;
}

TEST(Muon, NewtonSchulzMatchesTheIterationInDouble) {
  for (const char* type : {"quintic", "cubic5", "polar_express"})
    for (const Shape& shape : {Shape{7, 13}, Shape{13, 7}, Shape{16, 16}}) {
      SCOPED_TRACE(std::string(type) + " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]));
      const std::vector<NewtonSchulzStep> steps = newton_schulz_steps(type, 5);
      HostTensor x = randn(shape, 7, 0.3f);
      HostTensor f32 = orthogonalized(x, steps, false);
      test::expect_close(f32.f32(), newton_schulz_reference(x.f32(), shape[0], shape[1], steps, false), 2e-5, 2e-5, "f32");
      // bf16: a different rounding of one product now and then moves an element by a bf16 ulp or two.
      HostTensor b16 = orthogonalized(x, steps, true);
      test::expect_close(b16.f32(), newton_schulz_reference(x.f32(), shape[0], shape[1], steps, true), 2e-2, 2e-2, "bf16");
    }
}

// x = U·S·Vᵀ → about U·Vᵀ: the rows of the result of a wide matrix are near-orthonormal (quintic
// maps every singular value into about [0.7, 1.2]), whatever the input's scale.
TEST(Muon, NewtonSchulzOrthogonalizes) {
  const int64_t k = 12, n = 40;
  HostTensor x = randn({k, n}, 11, 25.0f);
  HostTensor o = orthogonalized(x, newton_schulz_steps("quintic", 5), true);
  double worst = 0;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double dot = 0;
      for (int64_t l = 0; l < n; ++l) dot += double(o.f32()[i * n + l]) * o.f32()[j * n + l];
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, 0.45);
  EXPECT_THROW(newton_schulz_steps("quintic", 0), Error);  // an iteration is needed
}

TEST(Muon, CoefficientSchedulesCycleOrRepeatTheirLast) {
  const auto quintic = newton_schulz_steps("quintic", 7);
  EXPECT_EQ(quintic[5], quintic[0]);
  EXPECT_EQ(quintic[6], quintic[1]);
  const auto polar = newton_schulz_steps("polar_express", 10);
  EXPECT_EQ(polar[9], polar[7]);
  EXPECT_NE(polar[7], polar[6]);
  EXPECT_EQ(newton_schulz_steps("simple", 3)[2][0], 3.4445f);
  EXPECT_TRUE(test::expect_error_mentioning([] { newton_schulz_steps("cubic5", 4); }, "--muon-num-ns-steps 5"));
  EXPECT_TRUE(test::expect_error_mentioning([] { newton_schulz_steps("septic", 5); }, "simple|quintic"));
  EXPECT_DOUBLE_EQ(muon_scale_factor(8, 32, MuonScaleMode::spectral), std::sqrt(32.0));
  EXPECT_DOUBLE_EQ(muon_scale_factor(8, 32, MuonScaleMode::unit_rms_norm), 0.5);
  EXPECT_DOUBLE_EQ(muon_scale_factor(8, 32, MuonScaleMode::shape_scaling), 1.0);
  EXPECT_DOUBLE_EQ(muon_scale_factor(32, 8, MuonScaleMode::shape_scaling), 2.0);
}

TEST(Muon, MomentumAndApplyFollowTheirFormulas) {
  const int64_t n = 301;
  for (bool nesterov : {false, true}) {
    HostTensor m = randn({n}, 3), grad = randn({n}, 4, 100.0f), u = zeros({n});
    HostTensor m0 = m;
    const MuonMomentumArgs a{0.9f, nesterov, 1.0f / 128.0f, 0.5f};
    muon_momentum(m.view(), u.view(), grad.view(), a);
    for (int64_t i = 0; i < n; ++i) {
      const double g = double(grad.f32()[i]) / 128.0 * 0.5;
      const double want_m = 0.9 * m0.f32()[i] + 0.1 * g;
      ASSERT_NEAR(m.f32()[i], want_m, 1e-5 * (1 + std::fabs(want_m)));
      const double want_u = nesterov ? 0.1 * g + 0.9 * want_m : want_m;
      ASSERT_NEAR(u.f32()[i], want_u, 1e-5 * (1 + std::fabs(want_u)));
    }
  }
  HostTensor p = randn({n}, 5), upd = randn({n}, 6);
  HostTensor p0 = p;
  HostTensor copy(DType::bf16, {n});
  muon_apply(p.view(), upd.view(), 0.01f, 0.1f, copy.view());
  for (int64_t i = 0; i < n; ++i) {
    const double want = p0.f32()[i] * (1 - 0.001) - 0.01 * upd.f32()[i];
    ASSERT_NEAR(p.f32()[i], want, 1e-6);
    ASSERT_EQ(copy.view().bf16()[i], f32_to_bf16(p.f32()[i]));
  }
  HostTensor short_u = zeros({n - 1});
  EXPECT_THROW(muon_apply(p.view(), short_u.view(), 0.01f, 0.0f), Error);
}

Param param(const std::string& name, HostTensor& value, HostTensor& grad, bool decay = true) {
  Param p;
  p.name = name;
  p.value = value.view();
  p.grad = grad.view();
  p.full_shape = value.shape;
  p.weight_decay = decay;
  return p;
}

// One step of the Optimizer with Muon equals the pieces composed by hand: Muon on the matrix and on
// the QKV's Q, K and V (2 query groups of 2 query heads, head width 3), Adam on the bias and the
// word embedding.
TEST(Muon, OptimizerStepsMatricesWithMuonAndTheRestWithAdam) {
  const int64_t h = 10, d = 3, groups = 2, qkv_rows = groups * (2 * d + 2 * d);
  HostTensor w = randn({6, h}, 1), b = randn({6}, 2), qkv = randn({qkv_rows, h}, 3), emb = randn({20, h}, 4);
  HostTensor gw = randn({6, h}, 11), gb = randn({6}, 12), gqkv = randn({qkv_rows, h}, 13), gemb = randn({20, h}, 14);
  std::vector<HostTensor> before = {w, b, qkv, emb};
  std::vector<Param> params = {param("decoder.layers.0.mlp.linear_fc1.weight", w, gw),
                               param("decoder.layers.0.mlp.linear_fc1.bias", b, gb, false),
                               param("decoder.layers.0.self_attention.linear_qkv.weight", qkv, gqkv),
                               param("embedding.word_embeddings.weight", emb, gemb)};
  MuonSetup setup;
  setup.config.momentum = 0.8f;
  setup.config.extra_scale_factor = 0.5f;
  setup.qkv = {2 * d, d, d};
  Optimizer optimizer(params, cpu_backend(), nullptr, nullptr, {}, &setup);
  int muon_segments = 0;
  for (const Optimizer::Segment& s : optimizer.segments()) {
    muon_segments += s.muon;
    EXPECT_EQ(s.v.empty(), s.muon) << s.param->name << ": Muon keeps one state, Adam two";
  }
  EXPECT_EQ(muon_segments, 2);
  OptimizerConfig oc;
  oc.clip_grad = 0.0f;
  const float lr = 0.05f, wd = 0.1f;
  optimizer.step(oc, lr, wd);

  const std::vector<NewtonSchulzStep> steps = newton_schulz_steps("quintic", 5);
  // u = (1 − β)·g (the momentum starts at 0); update = NS(u)·scale·0.5.
  const auto muon_update = [&](const float* g, int64_t rows, int64_t cols) {
    HostTensor u = zeros({rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) u.f32()[i] = 0.2f * g[i];  // lerp(0, g, 1 − 0.8)
    HostTensor o = orthogonalized(u, steps, true);
    scale_inplace(o.view(), static_cast<float>(muon_scale_factor(rows, cols, MuonScaleMode::spectral) * 0.5));
    return o;
  };
  const auto expect_muon = [&](HostTensor was, HostTensor& now, HostTensor update) {
    for (int64_t i = 0; i < now.numel(); ++i) {
      const double want = was.f32()[i] * (1.0 - double(lr) * wd) - lr * update.f32()[i];
      ASSERT_NEAR(now.f32()[i], want, 1e-6) << i;
    }
  };
  expect_muon(before[0], w, muon_update(gw.f32(), 6, h));
  // The QKV: rows of group j are [q (2d), k (d), v (d)]; Q, K and V orthogonalised apart.
  HostTensor qkv_update = zeros({qkv_rows, h});
  const int64_t starts[] = {0, 2 * d, 3 * d}, counts[] = {2 * d, d, d};
  for (int part = 0; part < 3; ++part) {
    HostTensor piece = zeros({groups * counts[part], h});
    for (int64_t j = 0; j < groups; ++j)
      for (int64_t r = 0; r < counts[part]; ++r)
        for (int64_t c = 0; c < h; ++c)
          piece.f32()[(j * counts[part] + r) * h + c] = gqkv.f32()[(j * 4 * d + starts[part] + r) * h + c];
    HostTensor o = muon_update(piece.f32(), groups * counts[part], h);
    for (int64_t j = 0; j < groups; ++j)
      for (int64_t r = 0; r < counts[part]; ++r)
        for (int64_t c = 0; c < h; ++c)
          qkv_update.f32()[(j * 4 * d + starts[part] + r) * h + c] = o.f32()[(j * counts[part] + r) * h + c];
  }
  expect_muon(before[2], qkv, qkv_update);
  // Adam's first step on the others, decay only where Megatron decays.
  for (int k : {1, 3}) {
    HostTensor p = before[static_cast<size_t>(k)], m = zeros(p.shape), v = zeros(p.shape);
    AdamWParams hp;
    hp.lr = lr;
    hp.weight_decay = params[static_cast<size_t>(k)].weight_decay ? wd : 0.0f;
    adamw_update(p.view(), params[static_cast<size_t>(k)].grad, m.view(), v.view(), hp);
    EXPECT_EQ(p.bytes, (k == 1 ? b : emb).bytes) << params[static_cast<size_t>(k)].name;
  }
}

}  // namespace
}  // namespace mt
