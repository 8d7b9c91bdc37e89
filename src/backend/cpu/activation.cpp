// CPU kernels for GeLU (erf and tanh forms) and SwiGLU: loops over the per-element arithmetic of
// backend/math/activation_math.h (shared with the CUDA kernels), built on the vectorisable exp so
// every loop here vectorises (glibc's erff/tanhf would not without -ffast-math).
#include "backend/cpu/activation.h"

#include "backend/math/activation_math.h"

namespace mt::cpu {

void gelu_fwd(const TensorView& out, const TensorView& inp, GeluForm form) {
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  float* y = out.f32();
  if (form == GeluForm::erf) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_erf(x[i]);
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
  }
}

void gelu_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& inp, GeluForm form) {
  const int64_t n = inp.numel();
  const float* x = inp.f32();
  const float* dy = dout.f32();
  float* dx = dinp.f32();
  if (form == GeluForm::erf) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_erf_grad(x[i]);
  } else {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_tanh_grad(x[i]);
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
