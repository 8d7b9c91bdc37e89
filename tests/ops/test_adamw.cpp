// Tests for ops/adamw.h: three steps against a hand-written fp64 AdamW (decoupled weight decay,
// bias corrections), the classic first-step property, and argument errors.
#include "ops/adamw.h"

#include <cmath>
#include <vector>

#include "testing.h"

namespace mt::test {
namespace {

// torch.optim.AdamW, step t (1-based), in double.
void adamw_ref(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m, std::vector<double>& v,
               const AdamWParams& hp) {
  const double b1 = hp.beta1, b2 = hp.beta2, t = static_cast<double>(hp.step);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1.0 - static_cast<double>(hp.lr) * hp.weight_decay;
    m[i] = b1 * m[i] + (1.0 - b1) * g[i];
    v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
    const double m_hat = m[i] / (1.0 - std::pow(b1, t)), v_hat = v[i] / (1.0 - std::pow(b2, t));
    p[i] -= hp.lr * m_hat / (std::sqrt(v_hat) + hp.eps);
  }
}

// Three steps with fresh gradients each step (including tiny ones, where eps matters) against
// the fp64 reference fed the same f32 gradients.  Each step moves params by ≤ lr = 1e-2; f32
// rounding of the update is ~1e-7·|p| + ~1e-6·lr, so params 1e-6 abs + 1e-6 rel and moments
// 1e-7 abs + 1e-5 rel.  Dropping the decay (lr·wd·p = 1e-3·p), a bias correction (≥ 0.1·lr at
// t ≤ 3) or flipping the update's sign is off by ≥ 1e-4.
void check_three_steps(int64_t n, float weight_decay) {
  HostTensor p = randn({n}, 321), m = zeros({n}), v = zeros({n});
  std::vector<double> rp = to_double(p), rm(static_cast<size_t>(n), 0.0), rv(static_cast<size_t>(n), 0.0);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = weight_decay;
  for (int64_t step = 1; step <= 3; ++step) {
    HostTensor g = randn({n}, 330 + static_cast<uint64_t>(step), 0.1f);
    g.f32()[0] = 1e-9f;  // |g| ~ eps: the eps term matters here
    hp.step = step;
    adamw_update(p.view(), g.view(), m.view(), v.view(), hp);
    adamw_ref(rp, to_double(g), rm, rv, hp);
    expect_close(p.f32(), rp, 1e-6, 1e-6, "param");
    expect_close(m.f32(), rm, 1e-7, 1e-5, "m");
    expect_close(v.f32(), rv, 1e-9, 1e-5, "v");
  }
}

TEST(AdamW, ThreeStepsMatchHandComputedFp64) { check_three_steps(37, 0.1f); }
TEST(AdamW, ThreeStepsWithoutWeightDecayMatchFp64) { check_three_steps(37, 0.0f); }
TEST(AdamW, LargeThreeStepsMatchFp64) { check_three_steps(100003, 0.1f); }

// With bias correction the first step is lr·g/(|g| + eps) ≈ lr·sign(g) whatever the gradient's
// scale; without it the step would be lr·(1 − β1)/√(1 − β2) ≈ 0.0032·lr.  1e-6 abs ≈ 4 ulp at 0.5.
TEST(AdamW, FirstStepMovesByLearningRate) {
  const int64_t n = 19;
  HostTensor p = zeros({n}), m = zeros({n}), v = zeros({n}), g = randn({n}, 341, 1e-2f);
  AdamWParams hp;
  hp.lr = 0.5f;
  adamw_update(p.view(), g.view(), m.view(), v.view(), hp);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g.f32()[i];
    EXPECT_NEAR(p.f32()[i], -0.5 * gi / (std::fabs(gi) + 1e-8), 1e-6) << i;
  }
}

// Weight decay is decoupled: with g = 0 (m = v = 0) only p·(1 − lr·wd) remains.
TEST(AdamW, ZeroGradientOnlyDecays) {
  HostTensor p = randn({8}, 351), m = zeros({8}), v = zeros({8}), g = zeros({8});
  const std::vector<double> p0 = to_double(p);
  AdamWParams hp;
  hp.lr = 0.1f;
  hp.weight_decay = 0.5f;
  adamw_update(p.view(), g.view(), m.view(), v.view(), hp);
  std::vector<double> ref(p0);
  for (double& x : ref) x *= 1.0 - 0.1 * 0.5;
  expect_close(p.f32(), ref, 1e-7, 1e-6, "decayed param");
}

TEST(AdamW, BadArgumentsThrow) {
  HostTensor p = zeros({8}), g = zeros({8}), m = zeros({8}), v = zeros({8}), short_v = zeros({7});
  HostTensor b16(DType::bf16, {8});
  AdamWParams hp;
  EXPECT_THROW(adamw_update(p.view(), g.view(), m.view(), short_v.view(), hp), Error);
  EXPECT_THROW(adamw_update(p.view(), b16.view(), m.view(), v.view(), hp), Error);
  hp.step = 0;
  EXPECT_THROW(adamw_update(p.view(), g.view(), m.view(), v.view(), hp), Error);
  hp.step = 1;
  hp.beta2 = 1.0f;
  EXPECT_THROW(adamw_update(p.view(), g.view(), m.view(), v.view(), hp), Error);
}

}  // namespace
}  // namespace mt::test
