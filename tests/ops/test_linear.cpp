// Tests for ops/linear.h: forward against an fp64 reference (with and without bias), backward
// against the fp64 analytic gradients and central finite differences, the dinp-empty path and
// shape errors.
#include "ops/linear.h"

#include <vector>

#include "testing.h"

namespace mt::test {
namespace {

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// out[n, o] = Σ_i inp[n, i]·weight[o, i] + bias[o]
std::vector<double> linear_ref(HostTensor& inp, HostTensor& weight, HostTensor* bias) {
  const int64_t n = inp.shape[0], in = inp.shape[1], o = weight.shape[0];
  std::vector<double> out(static_cast<size_t>(n * o));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < o; ++c) {
      double acc = bias ? bias->f32()[c] : 0.0;
      for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(inp.f32()[r * in + k]) * weight.f32()[c * in + k];
      out[r * o + c] = acc;
    }
  return out;
}

// Forward tolerance: f32 GEMM over K inputs of unit scale; rounding is ~K·2^−24·|terms|, so 1e-4
// absolute plus 1e-5 relative is loose for K ≤ 400 yet far below any wrong-index error (O(1)).
void check_forward(int64_t n, int64_t in, int64_t o, bool with_bias) {
  HostTensor inp = randn({n, in}, 1), weight = randn({o, in}, 2, 0.5f), bias = randn({o}, 3);
  HostTensor out = zeros({n, o});
  linear_fwd(out.view(), inp.view(), weight.view(), with_bias ? bias.view() : TensorView());
  expect_close(out.f32(), linear_ref(inp, weight, with_bias ? &bias : nullptr), 1e-4, 1e-5, "linear out");
}

TEST(Linear, ForwardMatchesFp64ReferenceWithBias) { check_forward(7, 37, 13, true); }
TEST(Linear, ForwardMatchesFp64ReferenceWithoutBias) { check_forward(7, 37, 13, false); }
TEST(Linear, ForwardMatchesFp64ReferenceLarge) { check_forward(129, 384, 250, true); }
// One row (decoding a token) takes the GEMV path.
TEST(Linear, OneRowForwardMatchesFp64Reference) {
  check_forward(1, 384, 250, true);
  check_forward(1, 37, 13, false);
}

struct LinearGrads {
  HostTensor dinp, dweight, dbias;
};

// Runs linear_bwd with Σ out·w as the loss (dout = w) onto non-zero starting gradients, so the
// checks also prove the op accumulates.
void check_backward(int64_t n, int64_t in, int64_t o, bool with_dinp, bool with_bias, bool finite_diff) {
  HostTensor inp = randn({n, in}, 11), weight = randn({o, in}, 12, 0.5f), bias = randn({o}, 13);
  HostTensor w = randn({n, o}, 14);  // loss weights = dout
  HostTensor dinp = randn({n, in}, 15), dweight = randn({o, in}, 16), dbias = randn({o}, 17);
  const std::vector<double> dinp0 = to_double(dinp), dweight0 = to_double(dweight), dbias0 = to_double(dbias);
  linear_bwd(with_dinp ? dinp.view() : TensorView(), dweight.view(), with_bias ? dbias.view() : TensorView(),
             w.view(), inp.view(), weight.view());

  // fp64 analytic gradients: dinp = w·W, dweight = wᵀ·inp, dbias = Σ_rows w.
  std::vector<double> ref_dinp(dinp0), ref_dweight(dweight0), ref_dbias(dbias0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < o; ++c) {
      const double g = w.f32()[r * o + c];
      for (int64_t k = 0; k < in; ++k) {
        if (with_dinp) ref_dinp[r * in + k] += g * weight.f32()[c * in + k];
        ref_dweight[c * in + k] += g * inp.f32()[r * in + k];
      }
      if (with_bias) ref_dbias[c] += g;
    }
  // Tolerance: sums of ≤ 400 unit-scale f32 products (plus a unit-scale start value).
  expect_close(dinp.f32(), ref_dinp, 1e-4, 1e-5, "dinp");
  expect_close(dweight.f32(), ref_dweight, 1e-4, 1e-5, "dweight");
  expect_close(dbias.f32(), ref_dbias, 1e-4, 1e-5, "dbias");
  if (!finite_diff) return;

  // Finite differences of Σ out·w.  The loss is linear, so the only error is f32 rounding of the
  // one perturbed row (~1e-6 / 2h); 2e-3 absolute is far below a sign flip or dropped term (O(1)).
  HostTensor out = zeros({n, o});
  auto loss = [&] {
    linear_fwd(out.view(), inp.view(), weight.view(), with_bias ? bias.view() : TensorView());
    return weighted_sum(out.f32(), w.f32(), out.numel());
  };
  const std::vector<double> fd_inp = finite_difference(inp, loss);
  const std::vector<double> fd_weight = finite_difference(weight, loss);
  const std::vector<double> fd_bias = finite_difference(bias, loss);
  // The op added its gradient onto the start values, so compare against start + FD.
  if (with_dinp) expect_close(dinp.f32(), plus(dinp0, fd_inp), 2e-3, 1e-3, "dinp vs finite differences");
  expect_close(dweight.f32(), plus(dweight0, fd_weight), 2e-3, 1e-3, "dweight vs finite differences");
  if (with_bias) expect_close(dbias.f32(), plus(dbias0, fd_bias), 2e-3, 1e-3, "dbias vs finite differences");
}

TEST(Linear, BackwardMatchesReferenceAndFiniteDifferences) { check_backward(7, 37, 13, true, true, true); }
TEST(Linear, BackwardWithoutBiasMatchesFiniteDifferences) { check_backward(5, 19, 11, true, false, true); }
TEST(Linear, BackwardLargeMatchesReference) { check_backward(129, 384, 250, true, true, false); }

TEST(Linear, EmptyDinpSkipsInputGradient) {
  // dinp empty: only dweight/dbias are produced; the reference check above covers their values.
  check_backward(7, 37, 13, false, true, true);
}

TEST(Linear, BadShapesThrow) {
  HostTensor inp = randn({4, 5}, 1), weight = randn({3, 5}, 2), out = zeros({4, 3});
  HostTensor bad_weight = randn({3, 6}, 3), bad_out = zeros({4, 4}), bad_bias = randn({4}, 4);
  EXPECT_THROW(linear_fwd(out.view(), inp.view(), bad_weight.view(), TensorView()), Error);
  EXPECT_THROW(linear_fwd(bad_out.view(), inp.view(), weight.view(), TensorView()), Error);
  EXPECT_THROW(linear_fwd(out.view(), inp.view(), weight.view(), bad_bias.view()), Error);
  HostTensor dweight = zeros({3, 5}), bad_dinp = zeros({4, 6});
  EXPECT_THROW(linear_bwd(bad_dinp.view(), dweight.view(), TensorView(), out.view(), inp.view(), weight.view()),
               Error);
  EXPECT_THROW(linear_bwd(TensorView(), dweight.view(), TensorView(), bad_out.view(), inp.view(), weight.view()),
               Error);
}

}  // namespace
}  // namespace mt::test
