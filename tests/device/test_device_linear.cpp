// Device cases of ops/linear.h against the CPU backend.
#include "device_testing.h"
#include "ops/linear.h"

namespace mt::test {
namespace {

TEST(DeviceLinear, ForwardAndBackward) {
  for (auto [n, in, out] : {std::tuple{1, 64, 48}, std::tuple{37, 53, 29}, std::tuple{256, 128, 384}}) {
    for (bool bias : {false, true}) {
      DeviceCase dev;
      HostTensor x = randn({n, in}, 1), w = randn({out, in}, 2), b = randn({out}, 3), y = zeros({n, out});
      HostTensor dy = randn({n, out}, 4), dx = randn({n, in}, 5), dw = randn({out, in}, 6), db = randn({out}, 7);
      const TensorView dev_x = dev.upload(x), dev_w = dev.upload(w), dev_b = bias ? dev.upload(b) : TensorView();
      const TensorView dev_y = dev.poisoned(DType::f32, {n, out}), dev_dy = dev.upload(dy);
      const TensorView dev_dx = dev.upload(dx), dev_dw = dev.upload(dw), dev_db = bias ? dev.upload(db) : TensorView();
      linear_fwd(y.view(), x.view(), w.view(), bias ? b.view() : TensorView());
      linear_fwd(dev_y, dev_x, dev_w, dev_b);
      // fp32 products summed in another order over k <= 384 terms of size ~1: ~1e-5 relative.
      dev.expect_matches(dev_y, y, 1e-4, 1e-4, "linear_fwd");
      linear_bwd(dx.view(), dw.view(), bias ? db.view() : TensorView(), dy.view(), x.view(), w.view());
      linear_bwd(dev_dx, dev_dw, dev_db, dev_dy, dev_x, dev_w);
      dev.expect_matches(dev_dx, dx, 1e-4, 1e-4, "dinp");
      dev.expect_matches(dev_dw, dw, 1e-4, 1e-4, "dweight");
      if (bias) dev.expect_matches(dev_db, db, 1e-4, 1e-4, "dbias");
    }
  }
}

TEST(DeviceLinear, NoInputGradient) {
  DeviceCase dev;
  HostTensor x = randn({9, 12}, 1), w = randn({7, 12}, 2), dy = randn({9, 7}, 3), dw = zeros({7, 12});
  const TensorView dev_dw = dev.upload(dw);
  linear_bwd(TensorView(), dw.view(), TensorView(), dy.view(), x.view(), w.view());
  linear_bwd(TensorView(), dev_dw, TensorView(), dev.upload(dy), dev.upload(x), dev.upload(w));
  dev.expect_matches(dev_dw, dw, 1e-4, 1e-4, "dweight");
}

}  // namespace
}  // namespace mt::test
