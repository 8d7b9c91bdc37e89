#include "backend/gemm.h"

namespace mt {

GemmDesc linear_fwd_gemm(int64_t rows, int64_t in, int64_t out, bool bias) {
  // outᵀ[O, N] = (weight_cm[I, O])ᵀ · inp_cm[I, N]
  GemmDesc d{GemmOperand::weight, GemmOperand::inp};
  d.trans_a = true;
  d.m = out, d.n = rows, d.k = in;
  d.lda = in, d.ldb = in, d.ldc = out;
  d.bias = bias;
  return d;
}

GemmDesc linear_dinp_gemm(int64_t rows, int64_t in, int64_t out) {
  // dinpᵀ[I, N] += weight_cm[I, O] · dout_cm[O, N]
  GemmDesc d{GemmOperand::weight, GemmOperand::dout};
  d.m = in, d.n = rows, d.k = out;
  d.lda = in, d.ldb = out, d.ldc = in;
  d.beta = 1.0f;
  return d;
}

GemmDesc linear_dweight_gemm(int64_t rows, int64_t in, int64_t out) {
  // dweightᵀ[I, O] += inp_cm[I, N] · (dout_cm[O, N])ᵀ
  GemmDesc d{GemmOperand::inp, GemmOperand::dout};
  d.trans_b = true;
  d.m = in, d.n = out, d.k = rows;
  d.lda = in, d.ldb = out, d.ldc = in;
  d.beta = 1.0f;
  return d;
}

namespace {
GemmInputs current_inputs = GemmInputs::f32;
}  // namespace

GemmInputs gemm_inputs() { return current_inputs; }

GemmInputsScope::GemmInputsScope(DType activations) : previous_(current_inputs) {
  current_inputs = activations == DType::bf16 ? GemmInputs::bf16 : activations == DType::f16 ? GemmInputs::f16 : GemmInputs::f32;
}

GemmInputsScope::~GemmInputsScope() { current_inputs = previous_; }

void gemm_reference(const GemmDesc& d, const float* a, const float* b, const float* bias, float* c) {
  // Element (i, j) of a column-major matrix with leading dimension ld sits at i + j·ld.
  auto at = [](const float* x, int64_t ld, bool trans, int64_t i, int64_t j) {
    return static_cast<double>(trans ? x[j + i * ld] : x[i + j * ld]);
  };
  for (int64_t j = 0; j < d.n; ++j)
    for (int64_t i = 0; i < d.m; ++i) {
      double acc = 0.0;
      for (int64_t p = 0; p < d.k; ++p) acc += at(a, d.lda, d.trans_a, i, p) * at(b, d.ldb, d.trans_b, p, j);
      float& out = c[i + j * d.ldc];
      if (d.bias) acc += bias[i];
      out = static_cast<float>(acc + (d.beta == 0.0f ? 0.0 : d.beta * static_cast<double>(out)));
    }
}

}  // namespace mt
