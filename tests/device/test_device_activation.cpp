// Device cases of ops/activation.h against the CPU backend: GeLU (both forms) and SwiGLU, forward
// (overwritten outputs, poisoned first) and backward (accumulated into the same initial gradient).
#include "device_testing.h"
#include "ops/activation.h"

namespace mt::test {
namespace {

// N(0, 3²) plus the tails and zero, where the erfc fit, exp's clamp and σ's saturation matter.
HostTensor activation_input(Shape s, uint64_t seed) {
  HostTensor x = randn(s, seed, 3.0f);
  const float edges[] = {0.0f, -1e-4f, 5.0f, -5.0f, 9.0f, -9.0f, 20.0f, -20.0f, -60.0f, 60.0f, -120.0f};
  for (size_t k = 0; k < sizeof edges / sizeof edges[0] && static_cast<int64_t>(k) < x.numel(); ++k)
    x.f32()[k] = edges[k];
  return x;
}

// The CUDA build may contract multiply-adds differently from the CPU's: a few ulp, scaled by |x|.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

TEST(DeviceActivation, PointwiseForwardAndBackward) {
  for (PointwiseActivation form :
       {PointwiseActivation::gelu, PointwiseActivation::gelu_tanh, PointwiseActivation::squared_relu})
    for (Shape shape : {Shape{1, 1}, Shape{7, 37}, Shape{3, 5, 257}, Shape{64, 1000}}) {
      SCOPED_TRACE(shape.str() + " activation " + std::to_string(static_cast<int>(form)));
      DeviceCase dev;
      HostTensor x = activation_input(shape, 11), dy = randn(shape, 12), y = zeros(shape);
      HostTensor dx = randn(shape, 13);  // accumulated into
      const TensorView dx_dev = dev.upload(dx), x_dev = dev.upload(x), dy_dev = dev.upload(dy);
      const TensorView y_dev = dev.poisoned(DType::f32, shape);
      pointwise_activation_fwd(y.view(), x.view(), form);
      pointwise_activation_fwd(y_dev, x_dev, form);
      dev.expect_matches(y_dev, y, kAtol, kRtol, "pointwise_activation_fwd");
      pointwise_activation_bwd(dx.view(), dy.view(), x.view(), form);
      pointwise_activation_bwd(dx_dev, dy_dev, x_dev, form);
      dev.expect_matches(dx_dev, dx, kAtol, kRtol, "pointwise_activation_bwd");
    }
}

TEST(DeviceActivation, SwigluForwardAndBackward) {
  for (auto [rows, f] : {std::pair<int64_t, int64_t>{1, 1}, {7, 37}, {5, 256}, {64, 1000}, {3, 3001}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(f));
    DeviceCase dev;
    HostTensor x = activation_input({rows, 2 * f}, 21), dy = randn({rows, f}, 22), y = zeros({rows, f});
    HostTensor dx = randn({rows, 2 * f}, 23);
    const TensorView dx_dev = dev.upload(dx), x_dev = dev.upload(x), dy_dev = dev.upload(dy);
    const TensorView y_dev = dev.poisoned(DType::f32, {rows, f});
    swiglu_fwd(y.view(), x.view());
    swiglu_fwd(y_dev, x_dev);
    dev.expect_matches(y_dev, y, kAtol, kRtol, "swiglu_fwd");
    swiglu_bwd(dx.view(), dy.view(), x.view());
    swiglu_bwd(dx_dev, dy_dev, x_dev);
    dev.expect_matches(dx_dev, dx, kAtol, kRtol, "swiglu_bwd");
  }
}

TEST(DeviceActivation, ThreeDimensionalSwiglu) {
  DeviceCase dev;
  HostTensor x = activation_input({4, 3, 2 * 45}, 31), y = zeros({4, 3, 45});
  const TensorView y_dev = dev.poisoned(DType::f32, {4, 3, 45});
  swiglu_fwd(y.view(), x.view());
  swiglu_fwd(y_dev, dev.upload(x));
  dev.expect_matches(y_dev, y, kAtol, kRtol, "swiglu_fwd [4, 3, 90]");
}

}  // namespace
}  // namespace mt::test
