// CUDA entry points of ops/linear.h: the GEMM descriptors of backend/gemm.h run through cuBLASLt
// with f32 matrices: in plain fp32 (CUBLAS_COMPUTE_32F: the same products as the CPU's sgemm, up to
// summation order), or, while gemm_inputs() says the operands are 16-bit values (--bf16, --fp16), on
// that type's tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF / _16F, f32 accumulation). The forward's
// bias is cuBLASLt's epilogue, the bias gradient a column-sum kernel.
#include <cublasLt.h>

#include <cstdint>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/linear.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"
#include "backend/gemm.h"
#include "backend/backend.h"

#define MT_CUBLAS_CHECK(call)                                                               \
  do {                                                                                      \
    const cublasStatus_t mt_cublas_status = (call);                                        \
    MT_CHECK(mt_cublas_status == CUBLAS_STATUS_SUCCESS)                                     \
        << #call << ": " << cublasLtGetStatusName(mt_cublas_status) << " ("                \
        << cublasLtGetStatusString(mt_cublas_status) << ")";                                \
  } while (0)

namespace mt::cuda {

namespace {

// cuBLASLt's handle and its workspace, made once per process on first use (a fixed 32 MiB,
// Hopper's recommendation for cuBLASLt; never reallocated in the step loop).
struct Lt {
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  Lt() {
    MT_CUBLAS_CHECK(cublasLtCreate(&handle));
    workspace = backend_for(Device::cuda).allocate(kWorkspaceBytes);
  }
};

Lt& lt() {
  static Lt instance;
  return instance;
}

// cuBLASLt descriptors, destroyed with their scope (also when a check throws).
struct MatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  explicit MatmulDesc(cublasComputeType_t compute) { MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F)); }
  ~MatmulDesc() { cublasLtMatmulDescDestroy(desc); }
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
  }
};

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref); }
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
    MT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof value));
  }
};

// The largest power of two (at most 256) dividing the address: cuBLASLt assumes 256 unless told,
// and row slices of the expert weights or activations may be only 4-byte aligned.
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 4 && address % a != 0) a /= 2;
  return a;
}

// One column-major matrix layout: rows × cols with leading dimension ld.
struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(int64_t rows, int64_t cols, int64_t ld) {
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, static_cast<uint64_t>(rows),
                                               static_cast<uint64_t>(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(layout); }
};

cublasComputeType_t compute_type(GemmInputs inputs) {
  switch (inputs) {
    case GemmInputs::bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmInputs::f16: return CUBLAS_COMPUTE_32F_FAST_16F;
    case GemmInputs::f32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

void run(const GemmDesc& d, const float* a, const float* b, float* c, const float* bias) {
  if (d.m == 0 || d.n == 0) return;
  if (d.k == 0) {  // no products: C = beta·C (+ bias), as the CPU's sgemm leaves it
    if (d.beta == 0.0f) MT_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(d.m * d.n) * sizeof(float), stream()));
    if (d.bias) {
      k::bias_add(c, bias, d.n, d.m, stream());  // row-major [n, m] += bias[m]
      check_launch("linear (bias of an empty product)");
    }
    return;
  }
  Lt& l = lt();
  const Layout la(d.trans_a ? d.k : d.m, d.trans_a ? d.m : d.k, d.lda);
  const Layout lb(d.trans_b ? d.n : d.k, d.trans_b ? d.k : d.n, d.ldb);
  const Layout lc(d.m, d.n, d.ldc);
  Preference pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, Lt::kWorkspaceBytes);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(a));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(b));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(c));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(c));
  // The 16-bit tensor-core path where the operands allow it; plain fp32 where cuBLASLt has no
  // algorithm for it (a slice aligned to only 4 bytes, say).
  for (const cublasComputeType_t compute : {compute_type(gemm_inputs()), CUBLAS_COMPUTE_32F}) {
    MatmulDesc op(compute);
    op.set(CUBLASLT_MATMUL_DESC_TRANSA, d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    op.set(CUBLASLT_MATMUL_DESC_TRANSB, d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
    if (d.bias) {
      op.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
      op.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    }
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(l.handle, op.desc, la.layout, lb.layout, lc.layout,
                                                                 lc.layout, pref.pref, 1, &heuristic, &found);
    if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
      const float alpha = 1.0f, beta = d.beta;
      MT_CUBLAS_CHECK(cublasLtMatmul(l.handle, op.desc, &alpha, a, la.layout, b, lb.layout, &beta, c, lc.layout, c,
                                     lc.layout, &heuristic.algo, l.workspace, Lt::kWorkspaceBytes, stream()));
      return;
    }
    if (compute == CUBLAS_COMPUTE_32F) MT_CUBLAS_CHECK(status);
  }
  MT_FAIL() << "linear: cuBLASLt has no algorithm for [" << d.m << " x " << d.k << "] · [" << d.k << " x " << d.n << "]";
}

const float* operand(GemmOperand o, const TensorView& inp, const TensorView& weight, const TensorView& dout) {
  switch (o) {
    case GemmOperand::inp: return inp.f32();
    case GemmOperand::weight: return weight.f32();
    case GemmOperand::dout: return dout.f32();
  }
  return nullptr;
}

}  // namespace

void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  const GemmDesc d = linear_fwd_gemm(inp.dim(0), inp.dim(1), weight.dim(0), !bias.empty());
  run(d, operand(d.a, inp, weight, {}), operand(d.b, inp, weight, {}), out.f32(),
      bias.empty() ? nullptr : bias.f32());
}

void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight) {
  const int64_t n = inp.dim(0), in = inp.dim(1), o = weight.dim(0);
  if (!dinp.empty()) {
    const GemmDesc d = linear_dinp_gemm(n, in, o);
    run(d, operand(d.a, inp, weight, dout), operand(d.b, inp, weight, dout), dinp.f32(), nullptr);
  }
  const GemmDesc d = linear_dweight_gemm(n, in, o);
  run(d, operand(d.a, inp, weight, dout), operand(d.b, inp, weight, dout), dweight.f32(), nullptr);
  if (!dbias.empty()) {
    k::bias_grad(dbias.f32(), dout.f32(), n, o, stream());
    check_launch("linear_bwd (bias gradient)");
  }
}

}  // namespace mt::cuda
