#include "backend/cpu/linear.h"

#include <cblas.h>

#include <algorithm>

namespace mt::cpu {

void linear_fwd(const TensorView& out, const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  const int n = static_cast<int>(inp.dim(0)), in = static_cast<int>(inp.dim(1)), o = static_cast<int>(weight.dim(0));
  float* y = out.f32();
  float beta = 0.0f;
  if (!bias.empty()) {
    // Seed every output row with the bias and let the GEMM accumulate onto it.
    const float* b = bias.f32();
#pragma omp parallel for schedule(static)
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < o; ++c) y[static_cast<size_t>(r) * o + c] = b[c];
    beta = 1.0f;
  }
  if (n == 1) {  // decoding one token: a GEMV streams the weight once, where a GEMM would pack it first
    cblas_sgemv(CblasRowMajor, CblasNoTrans, o, in, 1.0f, weight.f32(), in, inp.f32(), 1, beta, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o, in, 1.0f, inp.f32(), in, weight.f32(), in, beta, y, o);
}

void linear_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias, const TensorView& dout,
                const TensorView& inp, const TensorView& weight) {
  const int n = static_cast<int>(inp.dim(0)), in = static_cast<int>(inp.dim(1)), o = static_cast<int>(weight.dim(0));
  const float* dy = dout.f32();
  if (!dinp.empty())
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, o, 1.0f, dy, o, weight.f32(), in, 1.0f, dinp.f32(),
                in);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o, in, n, 1.0f, dy, o, inp.f32(), in, 1.0f, dweight.f32(), in);
  if (!dbias.empty()) {
    // Column blocks, rows walked in order inside each: contiguous reads, one thread per column,
    // the same sum on every run.
    constexpr int kBlock = 256;
    float* db = dbias.f32();
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < o; c0 += kBlock) {
      const int width = std::min(kBlock, o - c0);
      double acc[kBlock] = {};
      for (int r = 0; r < n; ++r) {
        const float* row = dy + static_cast<size_t>(r) * o + c0;
#pragma omp simd
        for (int c = 0; c < width; ++c) acc[c] += row[c];
      }
      for (int c = 0; c < width; ++c) db[c0 + c] += static_cast<float>(acc[c]);
    }
  }
}

}  // namespace mt::cpu
