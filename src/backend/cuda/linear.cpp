// CUDA entry points of ops/linear.h: the GEMM descriptors of backend/gemm.h run through cuBLASLt
// in plain fp32 (CUBLAS_COMPUTE_32F: the same products as the CPU's sgemm, up to summation order),
// the forward's bias as cuBLASLt's epilogue, the bias gradient as a column-sum kernel.
#include <cublasLt.h>

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

// One column-major matrix layout: rows × cols with leading dimension ld.
struct Layout {
  cublasLtMatrixLayout_t layout = nullptr;
  Layout(int64_t rows, int64_t cols, int64_t ld) {
    MT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, static_cast<uint64_t>(rows),
                                               static_cast<uint64_t>(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(layout); }
};

void run(const GemmDesc& d, const float* a, const float* b, float* c, const float* bias) {
  if (d.m == 0 || d.n == 0) return;
  if (d.k == 0) {  // no products: C = beta·C (+ bias) is not a case the linear op reaches with bias
    MT_CHECK(d.beta == 1.0f && !d.bias) << "linear: empty inner dimension";
    return;
  }
  Lt& l = lt();
  cublasLtMatmulDesc_t op = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (d.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    MT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  const Layout la(d.trans_a ? d.k : d.m, d.trans_a ? d.m : d.k, d.lda);
  const Layout lb(d.trans_b ? d.n : d.k, d.trans_b ? d.k : d.n, d.ldb);
  const Layout lc(d.m, d.n, d.ldc);
  cublasLtMatmulPreference_t pref = nullptr;
  MT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = Lt::kWorkspaceBytes;
  MT_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  MT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(l.handle, op, la.layout, lb.layout, lc.layout, lc.layout, pref, 1,
                                                 &heuristic, &found));
  MT_CHECK(found > 0) << "linear: cuBLASLt has no algorithm for [" << d.m << " x " << d.k << "] · [" << d.k << " x "
                      << d.n << "]";
  const float alpha = 1.0f, beta = d.beta;
  MT_CUBLAS_CHECK(cublasLtMatmul(l.handle, op, &alpha, a, la.layout, b, lb.layout, &beta, c, lc.layout, c, lc.layout,
                                 &heuristic.algo, l.workspace, ws, stream()));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(op);
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
