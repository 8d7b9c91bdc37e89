// Tests for ops/norm.h: LayerNorm and RMSNorm forward against fp64 references, backward against
// fp64 analytic gradients and central finite differences, accumulation, determinism across thread
// counts, and shape errors.
#include "ops/norm.h"

#include <cmath>
#include <cstring>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "testing.h"

namespace mt::test {
namespace {

constexpr float kEps = 1e-5f;

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// fp64 statistics of one row: mean (0 for RMSNorm) and rstd.
struct RowStats {
  double mean, rstd;
};

RowStats row_stats(const float* x, int64_t h, bool rms) {
  double mean = 0.0;
  if (!rms) {
    for (int64_t c = 0; c < h; ++c) mean += x[c];
    mean /= static_cast<double>(h);
  }
  double sq = 0.0;
  for (int64_t c = 0; c < h; ++c) sq += (x[c] - mean) * (x[c] - mean);
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(h) + kEps)};
}

struct NormRef {
  std::vector<double> out, mean, rstd;
};

NormRef norm_forward_ref(HostTensor& inp, HostTensor& weight, HostTensor* bias, bool rms) {
  const int64_t h = inp.shape[-1], n = inp.numel() / h;
  NormRef ref{std::vector<double>(static_cast<size_t>(n * h)), std::vector<double>(n), std::vector<double>(n)};
  for (int64_t r = 0; r < n; ++r) {
    const RowStats st = row_stats(inp.f32() + r * h, h, rms);
    ref.mean[r] = st.mean;
    ref.rstd[r] = st.rstd;
    for (int64_t c = 0; c < h; ++c)
      ref.out[r * h + c] =
          (inp.f32()[r * h + c] - st.mean) * st.rstd * weight.f32()[c] + (bias ? bias->f32()[c] : 0.0);
  }
  return ref;
}

// fp64 analytic gradients, derived per row from x̂ = (x − μ)·rstd, g = dout·w:
//   LayerNorm dx = rstd·(g − mean(g) − x̂·mean(g·x̂));  RMSNorm dx = rstd·(g − x̂·mean(g·x̂))
//   dw = Σ_rows dout·x̂;  db = Σ_rows dout.  (Accumulated onto the given start values.)
void norm_backward_ref(HostTensor& inp, HostTensor& weight, HostTensor& dout, bool rms, std::vector<double>& dinp,
                       std::vector<double>& dweight, std::vector<double>& dbias) {
  const int64_t h = inp.shape[-1], n = inp.numel() / h;
  std::vector<double> xhat(h), g(h);
  for (int64_t r = 0; r < n; ++r) {
    const RowStats st = row_stats(inp.f32() + r * h, h, rms);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t c = 0; c < h; ++c) {
      xhat[c] = (inp.f32()[r * h + c] - st.mean) * st.rstd;
      g[c] = static_cast<double>(dout.f32()[r * h + c]) * weight.f32()[c];
      mean_g += g[c] / h;
      mean_gx += g[c] * xhat[c] / h;
    }
    for (int64_t c = 0; c < h; ++c) {
      dinp[r * h + c] += st.rstd * (g[c] - (rms ? 0.0 : mean_g) - xhat[c] * mean_gx);
      dweight[c] += dout.f32()[r * h + c] * xhat[c];
      if (!dbias.empty()) dbias[c] += dout.f32()[r * h + c];
    }
  }
}

// Runs the op under test; `rms` selects RMSNorm (then bias and mean are unused).
void run_fwd(bool rms, HostTensor& out, HostTensor& mean, HostTensor& rstd, HostTensor& inp, HostTensor& weight,
             HostTensor* bias) {
  if (rms)
    rmsnorm_fwd(out.view(), rstd.view(), inp.view(), weight.view(), kEps);
  else
    layernorm_fwd(out.view(), mean.view(), rstd.view(), inp.view(), weight.view(), bias ? bias->view() : TensorView(),
                  kEps);
}

void run_bwd(bool rms, HostTensor& dinp, HostTensor& dweight, HostTensor* dbias, HostTensor& dout, HostTensor& inp,
             HostTensor& weight, HostTensor& mean, HostTensor& rstd) {
  if (rms)
    rmsnorm_bwd(dinp.view(), dweight.view(), dout.view(), inp.view(), weight.view(), rstd.view());
  else
    layernorm_bwd(dinp.view(), dweight.view(), dbias ? dbias->view() : TensorView(), dout.view(), inp.view(),
                  weight.view(), mean.view(), rstd.view());
}

// Forward: outputs are O(1); f32 row sums over h ≤ 1024 give ~1e-6 relative error, so 2e-5 abs +
// 1e-5 rel is robust while a wrong mean/variance/eps (O(1e-2) or more) fails.
void check_forward(bool rms, int64_t n, int64_t h, bool with_bias, float offset = 0.0f, double atol = 2e-5) {
  HostTensor inp = randn({n, h}, 21), weight = randn({h}, 22), bias = randn({h}, 23);
  for (int64_t i = 0; i < inp.numel(); ++i) inp.f32()[i] += offset;
  HostTensor out = zeros({n, h}), mean = zeros({n}), rstd = zeros({n});
  run_fwd(rms, out, mean, rstd, inp, weight, with_bias ? &bias : nullptr);
  const NormRef ref = norm_forward_ref(inp, weight, with_bias ? &bias : nullptr, rms);
  expect_close(out.f32(), ref.out, atol, 1e-5, "out");
  expect_close(rstd.f32(), ref.rstd, 0.0, 1e-5, "rstd");
  if (!rms) expect_close(mean.f32(), ref.mean, 1e-5, 1e-6, "mean");
}

TEST(LayerNorm, ForwardMatchesFp64Reference) { check_forward(false, 7, 37, true); }
TEST(LayerNorm, ForwardWithoutBiasMatchesFp64Reference) { check_forward(false, 7, 37, false); }
TEST(LayerNorm, ForwardLargeMatchesFp64Reference) { check_forward(false, 300, 1024, true); }
// A common offset of 300 over unit-variance rows: a one-pass E[x²] − E[x]² in f32 would lose the
// variance entirely (300² = 9e4, f32 ulp 8e-3), and an f32 sum for the mean is off by ~2e-4.  What
// must remain is the rounding of the saved f32 mean itself (ulp(300)/2 ≈ 1.5e-5, times rstd·|w| up
// to ~3), hence 8e-5 absolute here.
TEST(LayerNorm, ForwardLargeOffsetIsStable) { check_forward(false, 7, 768, true, 300.0f, 8e-5); }
TEST(RMSNorm, ForwardMatchesFp64Reference) { check_forward(true, 7, 37, false); }
TEST(RMSNorm, ForwardLargeMatchesFp64Reference) { check_forward(true, 300, 1024, false); }

// Backward against the fp64 analytic gradients (and optionally finite differences), accumulated
// onto random start values so the += contract is checked too.
void check_backward(bool rms, int64_t n, int64_t h, bool with_bias, bool finite_diff) {
  HostTensor inp = randn({n, h}, 31), weight = randn({h}, 32), bias = randn({h}, 33);
  HostTensor w = randn({n, h}, 34);  // loss weights: dout
  HostTensor out = zeros({n, h}), mean = zeros({n}), rstd = zeros({n});
  run_fwd(rms, out, mean, rstd, inp, weight, with_bias ? &bias : nullptr);

  HostTensor dinp = randn({n, h}, 35), dweight = randn({h}, 36), dbias = randn({h}, 37);
  const std::vector<double> dinp0 = to_double(dinp), dweight0 = to_double(dweight), dbias0 = to_double(dbias);
  run_bwd(rms, dinp, dweight, with_bias ? &dbias : nullptr, w, inp, weight, mean, rstd);

  std::vector<double> ref_dinp(dinp0), ref_dweight(dweight0), ref_dbias = with_bias ? dbias0 : std::vector<double>();
  norm_backward_ref(inp, weight, w, rms, ref_dinp, ref_dweight, ref_dbias);
  // dinp: O(1) values from row sums of h f32 terms → 5e-5 abs + 1e-5 rel.  dweight/dbias: sums over
  // n rows of O(1) terms, accumulated in double → error from f32 x̂ only; 1e-4 + 1e-5 rel.
  expect_close(dinp.f32(), ref_dinp, 5e-5, 1e-5, "dinp");
  expect_close(dweight.f32(), ref_dweight, 1e-4, 1e-5, "dweight");
  if (with_bias) expect_close(dbias.f32(), ref_dbias, 1e-4, 1e-5, "dbias");
  if (!finite_diff) return;

  // Central differences of Σ out·w with h = 1e-2.  Truncation error is h²/6·f''' ≈ 2e-5·|f'''| and
  // rounding noise in the perturbed row's f32 outputs is ~1e-6/(2h) ≈ 1e-4; 2e-3 abs + 1e-2 rel
  // covers both, while a sign flip or a missing mean term changes gradients by O(0.1–1).
  auto loss = [&] {
    run_fwd(rms, out, mean, rstd, inp, weight, with_bias ? &bias : nullptr);
    return weighted_sum(out.f32(), w.f32(), out.numel());
  };
  const std::vector<double> fd_inp = finite_difference(inp, loss);
  const std::vector<double> fd_weight = finite_difference(weight, loss);
  expect_close(dinp.f32(), plus(dinp0, fd_inp), 2e-3, 1e-2, "dinp vs finite differences");
  expect_close(dweight.f32(), plus(dweight0, fd_weight), 2e-3, 1e-2, "dweight vs finite differences");
  if (with_bias) {
    const std::vector<double> fd_bias = finite_difference(bias, loss);
    expect_close(dbias.f32(), plus(dbias0, fd_bias), 2e-3, 1e-2, "dbias vs finite differences");
  }
}

TEST(LayerNorm, BackwardMatchesReferenceAndFiniteDifferences) { check_backward(false, 7, 37, true, true); }
TEST(LayerNorm, BackwardWithoutBiasMatchesFiniteDifferences) { check_backward(false, 5, 19, false, true); }
TEST(LayerNorm, BackwardLargeMatchesFp64Reference) { check_backward(false, 300, 1024, true, false); }
TEST(RMSNorm, BackwardMatchesReferenceAndFiniteDifferences) { check_backward(true, 7, 37, false, true); }
TEST(RMSNorm, BackwardLargeMatchesFp64Reference) { check_backward(true, 300, 1024, false, false); }

// Leading dims [s, b, h] are flattened into rows: the same numbers as the [s·b, h] call.
TEST(LayerNorm, AcceptsThreeDimensionalActivations) {
  HostTensor inp = randn({3, 4, 37}, 41), weight = randn({37}, 42), bias = randn({37}, 43);
  HostTensor out = zeros({3, 4, 37}), mean = zeros({12}), rstd = zeros({12});
  layernorm_fwd(out.view(), mean.view(), rstd.view(), inp.view(), weight.view(), bias.view(), kEps);
  const NormRef ref = norm_forward_ref(inp, weight, &bias, false);
  expect_close(out.f32(), ref.out, 2e-5, 1e-5, "out");
}

#ifdef _OPENMP
// The weight/bias gradients sum over rows; they must not depend on how rows are split over threads.
TEST(LayerNorm, BackwardIsBitwiseDeterministicAcrossThreadCounts) {
  const int64_t n = 257, h = 200;
  HostTensor inp = randn({n, h}, 51), weight = randn({h}, 52), bias = randn({h}, 53), dout = randn({n, h}, 54);
  HostTensor out = zeros({n, h}), mean = zeros({n}), rstd = zeros({n});
  layernorm_fwd(out.view(), mean.view(), rstd.view(), inp.view(), weight.view(), bias.view(), kEps);
  std::vector<std::vector<uint8_t>> results;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    HostTensor dinp = zeros({n, h}), dweight = zeros({h}), dbias = zeros({h});
    layernorm_bwd(dinp.view(), dweight.view(), dbias.view(), dout.view(), inp.view(), weight.view(), mean.view(),
                  rstd.view());
    std::vector<uint8_t> all(dinp.bytes);
    all.insert(all.end(), dweight.bytes.begin(), dweight.bytes.end());
    all.insert(all.end(), dbias.bytes.begin(), dbias.bytes.end());
    results.push_back(all);
  }
  omp_set_num_threads(saved);
  for (size_t k = 1; k < results.size(); ++k) EXPECT_EQ(results[k], results[0]) << "thread count #" << k;
}
#endif

// --apply-layernorm-1p: the norm with weight_offset 1 is the norm with weight 1 + w (fp64
// reference), and its gradients are those of that norm, dweight included, bit for bit.
TEST(Norm, WeightOffsetIsTheNormOfOnePlusTheWeight) {
  const int64_t n = 9, h = 37;
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "RMSNorm" : "LayerNorm");
    HostTensor inp = randn({n, h}, 61), w = randn({h}, 62), bias = randn({h}, 63), dout = randn({n, h}, 64);
    HostTensor one_plus_w = zeros({h});
    for (int64_t c = 0; c < h; ++c) one_plus_w.f32()[c] = w.f32()[c] + 1.0f;
    HostTensor* b = rms ? nullptr : &bias;
    const TensorView bv = rms ? TensorView() : bias.view();
    HostTensor out = zeros({n, h}), mean = zeros({n}), rstd = zeros({n}), want = zeros({n, h});
    HostTensor want_mean = zeros({n}), want_rstd = zeros({n});
    if (rms) {
      rmsnorm_fwd(out.view(), rstd.view(), inp.view(), w.view(), kEps, 1.0f);
      rmsnorm_fwd(want.view(), want_rstd.view(), inp.view(), one_plus_w.view(), kEps);
    } else {
      layernorm_fwd(out.view(), mean.view(), rstd.view(), inp.view(), w.view(), bv, kEps, 1.0f);
      layernorm_fwd(want.view(), want_mean.view(), want_rstd.view(), inp.view(), one_plus_w.view(), bv, kEps);
    }
    expect_close(out.f32(), norm_forward_ref(inp, one_plus_w, b, rms).out, 2e-5, 1e-5, "out");
    EXPECT_EQ(out.bytes, want.bytes);
    HostTensor dinp = zeros({n, h}), dw = zeros({h}), db = zeros({h});
    HostTensor want_dinp = zeros({n, h}), want_dw = zeros({h}), want_db = zeros({h});
    if (rms) {
      rmsnorm_bwd(dinp.view(), dw.view(), dout.view(), inp.view(), w.view(), rstd.view(), 1.0f);
      rmsnorm_bwd(want_dinp.view(), want_dw.view(), dout.view(), inp.view(), one_plus_w.view(), rstd.view());
    } else {
      layernorm_bwd(dinp.view(), dw.view(), db.view(), dout.view(), inp.view(), w.view(), mean.view(), rstd.view(),
                    1.0f);
      layernorm_bwd(want_dinp.view(), want_dw.view(), want_db.view(), dout.view(), inp.view(), one_plus_w.view(),
                    mean.view(), rstd.view());
    }
    EXPECT_EQ(dinp.bytes, want_dinp.bytes);
    EXPECT_EQ(dw.bytes, want_dw.bytes);
    EXPECT_EQ(db.bytes, want_db.bytes);
  }
}

TEST(Norm, BadShapesThrow) {
  HostTensor inp = randn({4, 8}, 1), weight = randn({8}, 2), out = zeros({4, 8}), mean = zeros({4}), rstd = zeros({4});
  HostTensor bad_weight = randn({7}, 3), bad_out = zeros({4, 9}), bad_stat = zeros({5});
  HostTensor i32_inp(DType::i32, {4, 8});
  EXPECT_THROW(layernorm_fwd(out.view(), mean.view(), rstd.view(), inp.view(), bad_weight.view(), TensorView(), kEps),
               Error);
  EXPECT_THROW(layernorm_fwd(bad_out.view(), mean.view(), rstd.view(), inp.view(), weight.view(), TensorView(), kEps),
               Error);
  EXPECT_THROW(
      layernorm_fwd(out.view(), bad_stat.view(), rstd.view(), inp.view(), weight.view(), TensorView(), kEps), Error);
  EXPECT_THROW(layernorm_fwd(out.view(), mean.view(), rstd.view(), i32_inp.view(), weight.view(), TensorView(), kEps),
               Error);
  EXPECT_THROW(layernorm_fwd(out.view(), mean.view(), rstd.view(), inp.view(), weight.view(), TensorView(), -1.0f),
               Error);
  EXPECT_THROW(rmsnorm_fwd(out.view(), bad_stat.view(), inp.view(), weight.view(), kEps), Error);
  HostTensor dinp = zeros({4, 8}), dweight = zeros({8}), bad_dweight = zeros({9});
  EXPECT_THROW(layernorm_bwd(dinp.view(), bad_dweight.view(), TensorView(), out.view(), inp.view(), weight.view(),
                             mean.view(), rstd.view()),
               Error);
  EXPECT_THROW(rmsnorm_bwd(dinp.view(), dweight.view(), bad_out.view(), inp.view(), weight.view(), rstd.view()), Error);
}

}  // namespace
}  // namespace mt::test
