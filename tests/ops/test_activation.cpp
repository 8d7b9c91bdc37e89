// Tests for ops/activation.h: GeLU (erf form as torch.nn.functional.gelu, tanh approximation) and
// SwiGLU ([gate | up] layout), forward against fp64 references written with std::erf/std::tanh,
// backward against fp64 derivatives and central finite differences, and shape errors.
#include "ops/activation.h"

#include <cmath>
#include <vector>

#include "testing.h"

namespace mt::test {
namespace {

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);

double gelu_ref(double x, PointwiseActivation form) {
  if (form == PointwiseActivation::gelu) return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x, PointwiseActivation form) {
  if (form == PointwiseActivation::gelu)
    return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
}

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }
double silu_grad_ref(double g) {
  const double s = 1.0 / (1.0 + std::exp(-g));
  return s * (1.0 + g * (1.0 - s));
}

// Inputs: N(0, 3²) plus the edges (0, tiny, deep tails where Φ underflows, large positive).
HostTensor activation_inputs(Shape s, uint64_t seed) {
  HostTensor x = randn(s, seed, 3.0f);
  const float edges[] = {0.0f, 1e-4f, -1e-4f, 5.0f, -5.0f, 9.0f, -9.0f, 20.0f, -20.0f, -60.0f, 60.0f};
  for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]) && static_cast<int64_t>(k) < x.numel(); ++k)
    x.f32()[k] = edges[k];
  return x;
}

// Forward: the kernels use a vectorised exp (few ulp) and a 1.2e-7-relative erfc fit, so 1e-6
// absolute plus 2e-6 relative holds everywhere (tails included), while using the other GeLU form
// (differences up to 1e-3 near |x| ≈ 2) or a wrong constant fails.
void check_gelu_forward(PointwiseActivation form, Shape shape) {
  HostTensor x = activation_inputs(shape, 61), y = zeros(shape);
  pointwise_activation_fwd(y.view(), x.view(), form);
  std::vector<double> ref(x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) ref[i] = gelu_ref(x.f32()[i], form);
  expect_close(y.f32(), ref, 1e-6, 2e-6, form == PointwiseActivation::gelu ? "gelu erf" : "gelu tanh");
}

TEST(Gelu, ErfFormMatchesFp64Reference) { check_gelu_forward(PointwiseActivation::gelu, {7, 37}); }
TEST(Gelu, TanhFormMatchesFp64Reference) { check_gelu_forward(PointwiseActivation::gelu_tanh, {7, 37}); }
TEST(Gelu, LargeMatchesFp64Reference) {
  check_gelu_forward(PointwiseActivation::gelu, {64, 3001});
  check_gelu_forward(PointwiseActivation::gelu_tanh, {64, 3001});
}

// The two forms are different functions (max gap ≈ 4.7e-4 near |x| ≈ 2.2 in the output for
// these values); the form switch must reach the kernel.
TEST(Gelu, FormsDiffer) {
  HostTensor x = zeros({101}), a = zeros({101}), b = zeros({101});
  for (int i = 0; i < 101; ++i) x.f32()[i] = -5.0f + 0.1f * static_cast<float>(i);
  pointwise_activation_fwd(a.view(), x.view(), PointwiseActivation::gelu);
  pointwise_activation_fwd(b.view(), x.view(), PointwiseActivation::gelu_tanh);
  double gap = 0.0;
  for (int i = 0; i < 101; ++i) gap = std::max(gap, std::fabs(static_cast<double>(a.f32()[i]) - b.f32()[i]));
  EXPECT_GT(gap, 1e-4);
  EXPECT_LT(gap, 1e-3);
}

void check_gelu_backward(PointwiseActivation form, Shape shape, bool finite_diff) {
  HostTensor x = activation_inputs(shape, 71), w = randn(shape, 72), dx = randn(shape, 73);
  const std::vector<double> dx0 = to_double(dx);
  pointwise_activation_bwd(dx.view(), w.view(), x.view(), form);
  std::vector<double> ref(dx0);
  for (int64_t i = 0; i < x.numel(); ++i) ref[i] += static_cast<double>(w.f32()[i]) * gelu_grad_ref(x.f32()[i], form);
  // gelu' is O(1) (max ≈ 1.13); f32 evaluation gives ~1e-6 relative: 2e-6 abs + 1e-5 rel.
  expect_close(dx.f32(), ref, 2e-6, 1e-5, "gelu dinp");
  if (!finite_diff) return;
  // Central differences with h = 1e-2: truncation h²/6·|gelu'''| ≤ 2e-5·0.6 and f32 noise in
  // one output ≈ 1e-7·|x|/(2h) ≈ 1e-4 at |x| = 20; 5e-4 abs + 1e-3 rel.  A sign flip moves
  // gradients by up to 2.3, a missing x·φ(x) term by up to 0.4.
  HostTensor y = zeros(shape);
  auto loss = [&] {
    pointwise_activation_fwd(y.view(), x.view(), form);
    return weighted_sum(y.f32(), w.f32(), y.numel());
  };
  expect_close(dx.f32(), plus(dx0, finite_difference(x, loss)), 5e-4, 1e-3, "gelu dinp vs finite differences");
}

TEST(Gelu, ErfBackwardMatchesReferenceAndFiniteDifferences) { check_gelu_backward(PointwiseActivation::gelu, {7, 37}, true); }
TEST(Gelu, TanhBackwardMatchesReferenceAndFiniteDifferences) { check_gelu_backward(PointwiseActivation::gelu_tanh, {7, 37}, true); }
TEST(Gelu, BackwardLargeMatchesFp64Reference) {
  check_gelu_backward(PointwiseActivation::gelu, {64, 3001}, false);
  check_gelu_backward(PointwiseActivation::gelu_tanh, {64, 3001}, false);
}

// Squared ReLU (Megatron's --squared-relu): relu(x)², gradient 2·relu(x).  The forward is one
// multiply, so it matches fp64 to f32 rounding; a ReLU without the square, or a square without
// the ReLU, is off by O(1) for most inputs.
TEST(SquaredRelu, ForwardAndBackwardMatchFp64Reference) {
  const Shape shape{64, 301};
  HostTensor x = activation_inputs(shape, 91), y = zeros(shape), w = randn(shape, 92), dx = randn(shape, 93);
  const std::vector<double> dx0 = to_double(dx);
  pointwise_activation_fwd(y.view(), x.view(), PointwiseActivation::squared_relu);
  pointwise_activation_bwd(dx.view(), w.view(), x.view(), PointwiseActivation::squared_relu);
  std::vector<double> ref(x.numel()), dref(dx0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double r = std::max(0.0, static_cast<double>(x.f32()[i]));
    ref[i] = r * r;
    dref[i] += static_cast<double>(w.f32()[i]) * 2.0 * r;
  }
  expect_close(y.f32(), ref, 1e-7, 1e-6, "squared relu");
  expect_close(dx.f32(), dref, 1e-6, 1e-6, "squared relu dinp");
}

// Central differences with h = 1e-2 are exact for a quadratic away from the kink at 0; inputs
// stay at least 0.05 from it.
TEST(SquaredRelu, BackwardMatchesFiniteDifferences) {
  const Shape shape{5, 23};
  HostTensor x = randn(shape, 94, 2.0f), w = randn(shape, 95), dx = zeros(shape), y = zeros(shape);
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::fabs(x.f32()[i]) < 0.05f) x.f32()[i] = x.f32()[i] < 0 ? -0.05f : 0.05f;
  pointwise_activation_bwd(dx.view(), w.view(), x.view(), PointwiseActivation::squared_relu);
  auto loss = [&] {
    pointwise_activation_fwd(y.view(), x.view(), PointwiseActivation::squared_relu);
    return weighted_sum(y.f32(), w.f32(), y.numel());
  };
  expect_close(dx.f32(), finite_difference(x, loss), 1e-3, 1e-3, "squared relu dinp vs finite differences");
}

// SwiGLU reference with Megatron's layout: gate = inp[r, 0:f], up = inp[r, f:2f].
std::vector<double> swiglu_ref(HostTensor& inp, int64_t n, int64_t f) {
  std::vector<double> out(static_cast<size_t>(n * f));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < f; ++c)
      out[r * f + c] = silu_ref(inp.f32()[r * 2 * f + c]) * inp.f32()[r * 2 * f + f + c];
  return out;
}

// Forward: silu·up with O(1)–O(10) values; vectorised exp keeps it within 1e-6 abs + 2e-6 rel.
// Swapping gate and up (a layout bug) changes outputs by O(1).
void check_swiglu_forward(int64_t n, int64_t f) {
  HostTensor inp = activation_inputs({n, 2 * f}, 81), out = zeros({n, f});
  swiglu_fwd(out.view(), inp.view());
  expect_close(out.f32(), swiglu_ref(inp, n, f), 1e-6, 2e-6, "swiglu out");
}

TEST(SwiGLU, ForwardMatchesFp64Reference) { check_swiglu_forward(7, 37); }
TEST(SwiGLU, ForwardLargeMatchesFp64Reference) { check_swiglu_forward(64, 3001); }

// The layout is [gate | up]: with up = 1 the output is silu(gate); with gate = 1 it is σ(1)·up.
TEST(SwiGLU, LayoutIsGateThenUp) {
  HostTensor inp = zeros({1, 4}), out = zeros({1, 2});
  const float vals[] = {2.0f, -1.0f, 1.0f, 1.0f};  // gate = (2, −1), up = (1, 1)
  for (int i = 0; i < 4; ++i) inp.f32()[i] = vals[i];
  swiglu_fwd(out.view(), inp.view());
  EXPECT_NEAR(out.f32()[0], silu_ref(2.0), 1e-6);
  EXPECT_NEAR(out.f32()[1], silu_ref(-1.0), 1e-6);
}

void check_swiglu_backward(int64_t n, int64_t f, bool finite_diff) {
  HostTensor inp = activation_inputs({n, 2 * f}, 91), w = randn({n, f}, 92), dinp = randn({n, 2 * f}, 93);
  const std::vector<double> dinp0 = to_double(dinp);
  swiglu_bwd(dinp.view(), w.view(), inp.view());
  std::vector<double> ref(dinp0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < f; ++c) {
      const double g = inp.f32()[r * 2 * f + c], u = inp.f32()[r * 2 * f + f + c], dy = w.f32()[r * f + c];
      ref[r * 2 * f + c] += dy * u * silu_grad_ref(g);
      ref[r * 2 * f + f + c] += dy * silu_ref(g);
    }
  // Gradients are products of O(1)–O(60) factors; f32 evaluation: 5e-6 abs + 1e-5 rel.
  expect_close(dinp.f32(), ref, 5e-6, 1e-5, "swiglu dinp");
  if (!finite_diff) return;
  // Central differences, h = 1e-2: truncation ≤ h²/6·|∂³| ≈ 2e-5·|up|, f32 noise of one output
  // ≈ 1e-7·60/(2h) = 3e-4 at the ±60 edge values; 1e-3 abs + 1e-3 rel.  Sign flips and a missing
  // g·σ(1 − σ) term change gradients by O(1).
  HostTensor out = zeros({n, f});
  auto loss = [&] {
    swiglu_fwd(out.view(), inp.view());
    return weighted_sum(out.f32(), w.f32(), out.numel());
  };
  expect_close(dinp.f32(), plus(dinp0, finite_difference(inp, loss)), 1e-3, 1e-3,
               "swiglu dinp vs finite differences");
}

TEST(SwiGLU, BackwardMatchesReferenceAndFiniteDifferences) { check_swiglu_backward(7, 37, true); }
TEST(SwiGLU, BackwardLargeMatchesFp64Reference) { check_swiglu_backward(64, 3001, false); }

TEST(Activation, BadShapesThrow) {
  HostTensor x = randn({4, 6}, 1), y = zeros({4, 6}), bad = zeros({4, 5}), half = zeros({4, 3});
  HostTensor i32(DType::i32, {4, 6});
  EXPECT_THROW(pointwise_activation_fwd(bad.view(), x.view(), PointwiseActivation::gelu), Error);
  EXPECT_THROW(pointwise_activation_fwd(y.view(), i32.view(), PointwiseActivation::gelu), Error);
  EXPECT_THROW(pointwise_activation_bwd(y.view(), bad.view(), x.view(), PointwiseActivation::gelu_tanh), Error);
  EXPECT_THROW(swiglu_fwd(y.view(), x.view()), Error);  // out must be half of inp's last dim
  EXPECT_THROW(swiglu_fwd(half.view(), bad.view()), Error);
  swiglu_fwd(half.view(), x.view());  // the right shapes pass
  EXPECT_THROW(swiglu_bwd(bad.view(), half.view(), x.view()), Error);
}

}  // namespace
}  // namespace mt::test
