// Tests for ops/adamw.h: three steps against a hand-written fp64 AdamW (decoupled weight decay,
// bias corrections), the classic first-step property, and argument errors; the fused form
// (unscale, clip, 16-bit copy) against fp64 and bit for bit against the separate passes, and
// Optimizer::step (optim/optimizer.h) bit for bit against the unfused sequence of ops.
#include "ops/adamw.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "ops/elementwise.h"
#include "optim/optimizer.h"
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

// The fused form: g = raw·unscale·clip.  Against fp64 fed the raw gradient and the product of the
// factors in double: the f32 path rounds g twice (≤ 2 ulp of g), which moves m, v by ≤ 1e-7 rel
// and the update by ≲ 1e-7·lr, far inside the three-step tolerances above.  A missing factor
// (unscale 1/1000 or clip 0.37) changes g by ≥ 2.7x: m is off by far more than 1e-5 rel.
void check_fused_three_steps(DType copy_dtype, float unscale, float clip) {
  const int64_t n = 4099;
  HostTensor p = randn({n}, 361), m = zeros({n}), v = zeros({n}), copy = zeros({n}, copy_dtype);
  std::vector<double> rp = to_double(p), rm(static_cast<size_t>(n), 0.0), rv(static_cast<size_t>(n), 0.0);
  AdamWParams hp;
  hp.lr = 1e-2f;
  hp.beta2 = 0.95f;
  hp.weight_decay = 0.1f;
  hp.grad_unscale = unscale;
  hp.grad_clip = clip;
  for (int64_t step = 1; step <= 3; ++step) {
    HostTensor g = randn({n}, 370 + static_cast<uint64_t>(step), 0.1f / unscale);
    const std::vector<double> g_raw = to_double(g);
    std::vector<double> g_ref(g_raw);
    for (double& x : g_ref) x *= static_cast<double>(unscale) * clip;
    hp.step = step;
    adamw_update(p.view(), g.view(), m.view(), v.view(), hp, copy.view());
    adamw_ref(rp, g_ref, rm, rv, hp);
    expect_close(p.f32(), rp, 1e-6, 1e-6, "param");
    expect_close(m.f32(), rm, 1e-7, 1e-5, "m");
    expect_close(v.f32(), rv, 1e-9, 1e-5, "v");
    EXPECT_EQ(to_double(g), g_raw) << "the gradient is only read";
    const uint16_t* c16 = static_cast<const uint16_t*>(copy.view().data);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = copy_dtype == DType::bf16 ? f32_to_bf16(p.f32()[i]) : f32_to_f16(p.f32()[i]);
      ASSERT_EQ(c16[i], want) << "16-bit copy of element " << i << " at step " << step;
    }
  }
}

TEST(AdamW, FusedUnscaleClipAndBf16CopyMatchFp64) { check_fused_three_steps(DType::bf16, 1.0f / 1000.0f, 0.37f); }
TEST(AdamW, FusedUnscaleClipAndFp16CopyMatchFp64) { check_fused_three_steps(DType::f16, 1.0f / 65536.0f, 0.37f); }

// Bit for bit what the passes it replaces leave: scale_inplace by 1/loss_scale, scale_inplace by
// the clip coefficient, the plain update, cast into the 16-bit copy.
TEST(AdamW, FusedEqualsSeparatePassesBitForBit) {
  const int64_t n = 3001;
  for (DType dt : {DType::bf16, DType::f16}) {
    HostTensor p1 = randn({n}, 381), m1 = zeros({n}), v1 = zeros({n}), c1 = zeros({n}, dt);
    HostTensor p2 = p1, m2 = m1, v2 = v1, c2 = c1;
    AdamWParams fused;
    fused.lr = 3e-3f;
    fused.weight_decay = 0.05f;
    fused.grad_unscale = 1.0f / 1000.0f;  // not a power of two: the unscale rounds
    fused.grad_clip = 0.3f;
    for (int64_t step = 1; step <= 3; ++step) {
      HostTensor g = randn({n}, 390 + static_cast<uint64_t>(step), 50.0f), g2 = g;
      fused.step = step;
      adamw_update(p1.view(), g.view(), m1.view(), v1.view(), fused, c1.view());
      AdamWParams plain = fused;
      plain.grad_unscale = plain.grad_clip = 1.0f;
      scale_inplace(g2.view(), fused.grad_unscale);
      scale_inplace(g2.view(), fused.grad_clip);
      adamw_update(p2.view(), g2.view(), m2.view(), v2.view(), plain);
      cast(c2.view(), p2.view());
    }
    EXPECT_EQ(p1.bytes, p2.bytes);
    EXPECT_EQ(m1.bytes, m2.bytes);
    EXPECT_EQ(v1.bytes, v2.bytes);
    EXPECT_EQ(c1.bytes, c2.bytes);
  }
}

// Sizes below one chunk, across several and past the 1024-chunk cap of the partition.
TEST(AdamW, UnscaledSumSquaresEqualsSumSquaresOfTheUnscaledTensor) {
  for (int64_t n : {1, 37, 16385, 100003, 16 * 1024 * 1024 + 77}) {
    HostTensor g = zeros({n}), unscaled;
    for (int64_t i = 0; i < n; ++i)  // cheap, irregular, both signs, many exponents
      g.f32()[i] = static_cast<float>(static_cast<int64_t>((i * 2654435761u) % 20011) - 10005) * (1.0f + i % 7) * 0.37f;
    for (float unscale : {1.0f, 1.0f / 1000.0f, 1.0f / 65536.0f}) {
      unscaled = g;
      scale_inplace(unscaled.view(), unscale);
      const double fused = unscaled_sum_squares(g.view(), unscale), separate = sum_squares(unscaled.view());
      EXPECT_EQ(std::memcmp(&fused, &separate, sizeof fused), 0) << "n " << n << " unscale " << unscale << ": "
                                                                  << fused << " vs " << separate;
    }
  }
}

// The multi-tensor forms equal the single-tensor calls bit for bit whatever the thread count (the
// threads' shares then cut tensors at different blocks and chunks), with tensors from empty to
// larger than one share, and 16-bit copies on some.
TEST(AdamW, MultiTensorFormsEqualSingleTensorCallsOnAnyThreadCount) {
  const std::vector<int64_t> sizes = {0, 1, 255, 257, 40000, 17, 70001, 3};
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2, 3, 5}) {
    omp_set_num_threads(threads);
    std::vector<HostTensor> p1, p2, m1, m2, v1, v2, c1, c2, g;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t n = sizes[k];
      p1.push_back(randn({n}, 500 + k));
      m1.push_back(randn({n}, 520 + k, 0.01f));
      v1.push_back(zeros({n}));
      for (int64_t i = 0; i < n; ++i) v1.back().f32()[i] = 1e-4f * (1 + i % 5);
      g.push_back(randn({n}, 540 + k, 300.0f));
      c1.push_back(zeros({n}, k % 2 ? DType::bf16 : DType::f16));
    }
    p2 = p1, m2 = m1, v2 = v1, c2 = c1;
    AdamWParams hp;
    hp.lr = 1e-3f;
    hp.step = 7;
    hp.grad_unscale = 1.0f / 1000.0f;
    hp.grad_clip = 0.6f;
    std::vector<AdamWTensor> tensors;
    std::vector<TensorView> grads;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const bool copy = k % 3 != 0;
      const float wd = k % 2 ? 0.1f : 0.0f;
      tensors.push_back({p1[k].view(), g[k].view(), m1[k].view(), v1[k].view(), copy ? c1[k].view() : TensorView(), wd});
      AdamWParams single = hp;
      single.weight_decay = wd;
      adamw_update(p2[k].view(), g[k].view(), m2[k].view(), v2[k].view(), single, copy ? c2[k].view() : TensorView());
      grads.push_back(g[k].view());
    }
    adamw_update_multi(tensors, hp);
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_EQ(p1[k].bytes, p2[k].bytes) << "param " << k << ", " << threads << " threads";
      EXPECT_EQ(m1[k].bytes, m2[k].bytes) << "m " << k << ", " << threads << " threads";
      EXPECT_EQ(v1[k].bytes, v2[k].bytes) << "v " << k << ", " << threads << " threads";
      EXPECT_EQ(c1[k].bytes, c2[k].bytes) << "copy " << k << ", " << threads << " threads";
    }
    std::vector<double> scratch(static_cast<size_t>(unscaled_sum_squares_multi_scratch(grads))), sums(grads.size());
    unscaled_sum_squares_multi(grads, hp.grad_unscale, scratch, sums);
    for (size_t k = 0; k < sizes.size(); ++k) {
      const double single = unscaled_sum_squares(grads[k], hp.grad_unscale);
      EXPECT_EQ(std::memcmp(&sums[k], &single, sizeof single), 0) << "tensor " << k << ", " << threads << " threads";
    }
    std::vector<double> short_scratch(scratch.size() - 1);
    EXPECT_THROW(unscaled_sum_squares_multi(grads, 1.0f, short_scratch, sums), Error);
  }
  omp_set_num_threads(saved_threads);
}

// Optimizer::step under a loss scale with clipping active, for f32, bf16 and f16 parameters, against
// the unfused sequence of public ops it replaces (unscale, grad_norm, clip_grads, update, cast),
// which is the step as it was before the fusion: same norm and same bits in every tensor.
TEST(AdamW, OptimizerStepEqualsUnfusedSequenceBitForBit) {
  const std::vector<Shape> shapes = {{33, 17}, {17}, {1029}, {5, 7, 3}};
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<HostTensor> values, grads, ref_values, ref_main, ref_m, ref_v;
    std::vector<Param> params, ref_params;
    for (size_t k = 0; k < shapes.size(); ++k) {
      HostTensor main = randn(shapes[k], 410 + k, 0.5f);
      HostTensor value(dt, shapes[k]);
      cast(value.view(), main.view());
      values.push_back(value);
      ref_values.push_back(value);
      HostTensor rm(DType::f32, shapes[k]);
      cast(rm.view(), value.view());
      ref_main.push_back(rm);
      ref_m.push_back(zeros(shapes[k]));
      ref_v.push_back(zeros(shapes[k]));
      grads.push_back(zeros(shapes[k]));
    }
    std::vector<HostTensor> ref_grads = grads;
    for (size_t k = 0; k < shapes.size(); ++k) {
      Param p;
      p.value = values[k].view();
      p.grad = grads[k].view();
      p.weight_decay = k != 1;
      params.push_back(p);
      p.value = ref_values[k].view();
      p.grad = ref_grads[k].view();
      ref_params.push_back(p);
    }
    Optimizer optimizer(params, cpu_backend(), nullptr);
    OptimizerConfig oc;
    oc.clip_grad = 1.0f;
    const float loss_scale = 1000.0f, lr = 2e-3f, wd = 0.1f;
    for (int64_t step = 1; step <= 3; ++step) {
      for (size_t k = 0; k < shapes.size(); ++k) {
        grads[k] = randn(shapes[k], 420 + 10 * step + k, 5.0f * loss_scale);  // norm ≈ 5·√n ≫ clip
        ref_grads[k] = grads[k];
        params[k].grad = grads[k].view();
        ref_params[k].grad = ref_grads[k].view();
      }
      const Optimizer::StepResult result = optimizer.step(oc, lr, wd, loss_scale);
      // The unfused step.
      for (const Param& p : ref_params) scale_inplace(p.grad, 1.0f / loss_scale);
      const double norm = grad_norm(ref_params);
      EXPECT_LT(clip_grads(ref_params, norm, oc.clip_grad), 1.0) << "clipping must be active";
      AdamWParams hp;
      hp.lr = lr;
      hp.beta1 = oc.adam_beta1;
      hp.beta2 = oc.adam_beta2;
      hp.eps = oc.adam_eps;
      hp.step = step;
      for (size_t k = 0; k < shapes.size(); ++k) {
        hp.weight_decay = ref_params[k].weight_decay ? wd : 0.0f;
        const TensorView main = dt == DType::f32 ? ref_params[k].value : ref_main[k].view();
        adamw_update(main, ref_params[k].grad, ref_m[k].view(), ref_v[k].view(), hp);
        if (dt != DType::f32) cast(ref_params[k].value, main);
      }
      EXPECT_FALSE(result.found_inf);
      EXPECT_EQ(std::memcmp(&result.grad_norm, &norm, sizeof norm), 0) << result.grad_norm << " vs " << norm;
      for (size_t k = 0; k < shapes.size(); ++k)
        EXPECT_EQ(values[k].bytes, ref_values[k].bytes) << "dtype " << dtype_name(dt) << " param " << k << " step " << step;
    }
  }
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
  hp.beta2 = 0.999f;
  HostTensor f32_copy = zeros({8}), short_copy = zeros({7}, DType::bf16);
  EXPECT_THROW(adamw_update(p.view(), g.view(), m.view(), v.view(), hp, f32_copy.view()), Error);
  EXPECT_THROW(adamw_update(p.view(), g.view(), m.view(), v.view(), hp, short_copy.view()), Error);
  hp.grad_unscale = INFINITY;
  EXPECT_THROW(adamw_update(p.view(), g.view(), m.view(), v.view(), hp), Error);
  EXPECT_THROW(unscaled_sum_squares(b16.view(), 1.0f), Error);
}

}  // namespace
}  // namespace mt::test
