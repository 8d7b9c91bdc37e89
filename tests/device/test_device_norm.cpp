// Device cases of ops/norm.h against the CPU backend: LayerNorm (with and without bias) and RMSNorm,
// forward (outputs and saved statistics, poisoned first) and backward (dinp, dweight, dbias
// accumulated into the same initial contents on both).
#include "device_testing.h"
#include "ops/norm.h"

namespace mt::test {
namespace {

// The device reduces rows in another order (block partials): a few ulp on the statistics, carried
// through; parameter gradients sum rows in the CPU's order, in double.
constexpr double kAtol = 2e-5, kRtol = 2e-5;

struct Dims {
  int64_t rows, h;
};
// h below, at and above one block's width and not a multiple of 32; a single row and many rows.
const Dims kDims[] = {{1, 1}, {1, 7}, {7, 37}, {5, 256}, {33, 300}, {300, 1024}, {4, 3001}};

std::string name(const Dims& d) { return std::to_string(d.rows) + "x" + std::to_string(d.h); }

TEST(DeviceNorm, LayerNormForwardAndBackward) {
  for (const Dims& d : kDims)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(name(d) + (with_bias ? " with bias" : " without bias"));
      DeviceCase dev;
      const float eps = 1e-5f;
      HostTensor x = randn({d.rows, d.h}, 1, 2.0f), w = randn({d.h}, 2), b = randn({d.h}, 3);
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 3.0f;  // an offset the mean must remove
      HostTensor y = zeros({d.rows, d.h}), mean = zeros({d.rows}), rstd = zeros({d.rows});
      const TensorView x_dev = dev.upload(x), w_dev = dev.upload(w);
      const TensorView b_dev = with_bias ? dev.upload(b) : TensorView();
      const TensorView bias = with_bias ? b.view() : TensorView();
      const TensorView y_dev = dev.poisoned(DType::f32, {d.rows, d.h});
      const TensorView mean_dev = dev.poisoned(DType::f32, {d.rows}), rstd_dev = dev.poisoned(DType::f32, {d.rows});
      layernorm_fwd(y.view(), mean.view(), rstd.view(), x.view(), w.view(), bias, eps);
      layernorm_fwd(y_dev, mean_dev, rstd_dev, x_dev, w_dev, b_dev, eps);
      dev.expect_matches(mean_dev, mean, kAtol, kRtol, "layernorm_fwd mean");
      dev.expect_matches(rstd_dev, rstd, kAtol, kRtol, "layernorm_fwd rstd");
      dev.expect_matches(y_dev, y, kAtol, kRtol, "layernorm_fwd out");

      // The backward from the CPU's statistics on both, so only the backward's own order differs.
      HostTensor dy = randn({d.rows, d.h}, 4), dx = randn({d.rows, d.h}, 5), dw = randn({d.h}, 6),
                 db = randn({d.h}, 7);
      const TensorView dx_dev = dev.upload(dx), dw_dev = dev.upload(dw), db_dev = with_bias ? dev.upload(db) : TensorView();
      layernorm_bwd(dx.view(), dw.view(), with_bias ? db.view() : TensorView(), dy.view(), x.view(), w.view(),
                    mean.view(), rstd.view());
      layernorm_bwd(dx_dev, dw_dev, db_dev, dev.upload(dy), x_dev, w_dev, dev.upload(mean), dev.upload(rstd));
      dev.expect_matches(dx_dev, dx, kAtol, kRtol, "layernorm_bwd dinp");
      dev.expect_matches(dw_dev, dw, kAtol, kRtol, "layernorm_bwd dweight");
      if (with_bias) dev.expect_matches(db_dev, db, kAtol, kRtol, "layernorm_bwd dbias");
    }
}

TEST(DeviceNorm, RMSNormForwardAndBackward) {
  for (const Dims& d : kDims) {
    SCOPED_TRACE(name(d));
    DeviceCase dev;
    const float eps = 1e-6f;
    HostTensor x = randn({d.rows, d.h}, 11, 2.0f), w = randn({d.h}, 12);
    HostTensor y = zeros({d.rows, d.h}), rstd = zeros({d.rows});
    const TensorView x_dev = dev.upload(x), w_dev = dev.upload(w);
    const TensorView y_dev = dev.poisoned(DType::f32, {d.rows, d.h}), rstd_dev = dev.poisoned(DType::f32, {d.rows});
    rmsnorm_fwd(y.view(), rstd.view(), x.view(), w.view(), eps);
    rmsnorm_fwd(y_dev, rstd_dev, x_dev, w_dev, eps);
    dev.expect_matches(rstd_dev, rstd, kAtol, kRtol, "rmsnorm_fwd rstd");
    dev.expect_matches(y_dev, y, kAtol, kRtol, "rmsnorm_fwd out");

    HostTensor dy = randn({d.rows, d.h}, 13), dx = randn({d.rows, d.h}, 14), dw = randn({d.h}, 15);
    const TensorView dx_dev = dev.upload(dx), dw_dev = dev.upload(dw);
    rmsnorm_bwd(dx.view(), dw.view(), dy.view(), x.view(), w.view(), rstd.view());
    rmsnorm_bwd(dx_dev, dw_dev, dev.upload(dy), x_dev, w_dev, dev.upload(rstd));
    dev.expect_matches(dx_dev, dx, kAtol, kRtol, "rmsnorm_bwd dinp");
    dev.expect_matches(dw_dev, dw, kAtol, kRtol, "rmsnorm_bwd dweight");
  }
}

// Activations [s, b, h]: the norm acts on the last dim of any leading shape.
TEST(DeviceNorm, ThreeDimensionalActivations) {
  DeviceCase dev;
  HostTensor x = randn({6, 3, 40}, 21), w = randn({40}, 22), b = randn({40}, 23);
  HostTensor y = zeros({6, 3, 40}), mean = zeros({18}), rstd = zeros({18});
  const TensorView y_dev = dev.poisoned(DType::f32, {6, 3, 40});
  const TensorView mean_dev = dev.poisoned(DType::f32, {18}), rstd_dev = dev.poisoned(DType::f32, {18});
  layernorm_fwd(y.view(), mean.view(), rstd.view(), x.view(), w.view(), b.view(), 1e-5f);
  layernorm_fwd(y_dev, mean_dev, rstd_dev, dev.upload(x), dev.upload(w), dev.upload(b), 1e-5f);
  dev.expect_matches(y_dev, y, kAtol, kRtol, "layernorm_fwd [6, 3, 40]");
}

// Two device runs of the backward give the same bits (no float atomics, fixed reduction orders).
TEST(DeviceNorm, BackwardIsBitwiseDeterministic) {
  const int64_t rows = 513, h = 777;
  HostTensor x = randn({rows, h}, 31), w = randn({h}, 32), b = randn({h}, 33), dy = randn({rows, h}, 34);
  HostTensor y = zeros({rows, h}), mean = zeros({rows}), rstd = zeros({rows});
  layernorm_fwd(y.view(), mean.view(), rstd.view(), x.view(), w.view(), b.view(), 1e-5f);
  std::vector<HostTensor> runs;
  DeviceCase dev;
  const TensorView x_dev = dev.upload(x), w_dev = dev.upload(w), dy_dev = dev.upload(dy);
  const TensorView mean_dev = dev.upload(mean), rstd_dev = dev.upload(rstd);
  for (int run = 0; run < 2; ++run) {
    const TensorView dx = dev.upload(zeros({rows, h}).view()), dw = dev.upload(zeros({h}).view()),
                     db = dev.upload(zeros({h}).view());
    layernorm_bwd(dx, dw, db, dy_dev, x_dev, w_dev, mean_dev, rstd_dev);
    runs.push_back(dev.download(dx));
    runs.push_back(dev.download(dw));
    runs.push_back(dev.download(db));
  }
  for (int k = 0; k < 3; ++k) EXPECT_EQ(runs[k].bytes, runs[k + 3].bytes) << "output " << k << " differs between runs";
}

}  // namespace
}  // namespace mt::test
