// Owns the GEMMs of the linear op as the column-major BLAS libraries see them (cuBLASLt): plain
// descriptors made by host code, so a CPU test can execute them with a reference loop and compare
// with the CPU linear op, and the CUDA backend only translates them into library calls.
//
// Row-major X[r, c] is column-major Xᵀ[c, r] with leading dimension c. So out[N, O] = inp · weightᵀ
// is, column-major, outᵀ[O, N] = weight_cm[I, O]ᵀ · inp_cm[I, N]: m = O, n = N, k = I.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace mt {

// Which tensor of the linear op plays a GEMM operand.
enum class GemmOperand { inp, weight, dout };

// C[m, n] = op(A)[m, k] · op(B)[k, n] + beta · C (+ bias[m] on every column when `bias`).
// All matrices column-major; op(X) = Xᵀ when trans_X.
struct GemmDesc {
  GemmOperand a, b;  // which tensors are A and B; C is the op's output
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float beta = 0.0f;
  bool bias = false;
};

// out[N, O] = inp[N, I] · weight[O, I]ᵀ (+ bias)
GemmDesc linear_fwd_gemm(int64_t rows, int64_t in, int64_t out, bool bias);
// dinp[N, I] += dout[N, O] · weight[O, I]
GemmDesc linear_dinp_gemm(int64_t rows, int64_t in, int64_t out);
// dweight[O, I] += dout[N, O]ᵀ · inp[N, I]
GemmDesc linear_dweight_gemm(int64_t rows, int64_t in, int64_t out);

// What the GEMMs' f32 operands hold while a model runs: any f32 values, or values of one 16-bit type
// (--bf16 / --fp16 round activations and weights to it). The CUDA backend then multiplies on that
// type's tensor cores with f32 accumulation, reading any operand that is not such a value as one (as
// Megatron's 16-bit GEMMs do); the CPU's sgemm multiplies the f32 values either way.
enum class GemmInputs { f32, bf16, f16 };
GemmInputs gemm_inputs();

// Sets gemm_inputs() from a model's activation dtype for a scope (its forward and backward),
// restoring the previous value at its end.
class GemmInputsScope {
 public:
  explicit GemmInputsScope(DType activations);
  ~GemmInputsScope();
  GemmInputsScope(const GemmInputsScope&) = delete;
  GemmInputsScope& operator=(const GemmInputsScope&) = delete;

 private:
  GemmInputs previous_;
};

// Executes d on the host in double, with the operands named by d.a and d.b: the tests' reference.
void gemm_reference(const GemmDesc& d, const float* a, const float* b, const float* bias, float* c);

}  // namespace mt
