// CPU kernels for the pointwise activations (GeLU in both forms, squared ReLU) and SwiGLU: loops over the per-element arithmetic of
// backend/math/activation_math.h (shared with the CUDA kernels), built on the vectorisable exp so
// every loop here vectorises (glibc's erff/tanhf would not without -ffast-math).
#include "backend/cpu/activation.h"

#include "backend/math/activation_math.h"

namespace mt::cpu {

namespace {

template <PointwiseActivation A>
void pointwise_fwd(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = pointwise_value<A>(x[i]);
}

template <PointwiseActivation A>
void pointwise_bwd(float* dx, const float* dy, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * pointwise_grad<A>(x[i]);
}

}  // namespace

void pointwise_activation_fwd(const TensorView& out, const TensorView& inp, PointwiseActivation act) {
  float* y = out.f32();
  const float* x = inp.f32();
  const int64_t n = inp.numel();
  switch (act) {
    case PointwiseActivation::gelu: return pointwise_fwd<PointwiseActivation::gelu>(y, x, n);
    case PointwiseActivation::gelu_tanh: return pointwise_fwd<PointwiseActivation::gelu_tanh>(y, x, n);
    case PointwiseActivation::squared_relu: return pointwise_fwd<PointwiseActivation::squared_relu>(y, x, n);
  }
}

void pointwise_activation_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp,
                              PointwiseActivation act) {
  float* dx = dinp.f32();
  const float* dy = dout.f32();
  const float* x = inp.f32();
  const int64_t n = inp.numel();
  switch (act) {
    case PointwiseActivation::gelu: return pointwise_bwd<PointwiseActivation::gelu>(dx, dy, x, n);
    case PointwiseActivation::gelu_tanh: return pointwise_bwd<PointwiseActivation::gelu_tanh>(dx, dy, x, n);
    case PointwiseActivation::squared_relu: return pointwise_bwd<PointwiseActivation::squared_relu>(dx, dy, x, n);
  }
}

void swiglu_fwd(const TensorView& out, const TensorView& inp) {
  const int64_t f = out.dim(-1), rows = f ? out.numel() / f : 0;
  const float* x_all = inp.f32();
  float* y_all = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x_all + r * 2 * f;
    const float* up = gate + f;
    float* y = y_all + r * f;
#pragma omp simd
    for (int64_t c = 0; c < f; ++c) y[c] = swiglu(gate[c], up[c]);
  }
}

void swiglu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  const int64_t f = dout.dim(-1), rows = f ? dout.numel() / f : 0;
  const float* x_all = inp.f32();
  const float* dy_all = dout.f32();
  float* dx_all = dinp.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x_all + r * 2 * f;
    const float* up = gate + f;
    const float* dy = dy_all + r * f;
    float* dgate = dx_all + r * 2 * f;
    float* dup = dgate + f;
#pragma omp simd
    for (int64_t c = 0; c < f; ++c) {
      const SwigluGrad d = swiglu_grad(gate[c], up[c], dy[c]);
      dgate[c] += d.dgate;
      dup[c] += d.dup;
    }
  }
}

}  // namespace mt::cpu
