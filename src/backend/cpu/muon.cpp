// CPU kernels for Muon: the element-wise steps from backend/math/muon_math.h, and the Newton–Schulz
// iteration as OpenBLAS sgemm calls whose α/β epilogues are the iteration's polynomial, rounded to
// bf16 after every product when the iteration runs in bf16.
#include "backend/cpu/muon.h"
#include "backend/cpu/elementwise.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/math/muon_math.h"

namespace mt::cpu {

namespace {

void round_bf16(float* x, int64_t n) { round_to_dtype(TensorView(x, DType::f32, {n}), DType::bf16); }

}  // namespace

void muon_momentum(const TensorView& m, const TensorView& update, const TensorView& grad, const MuonMomentumArgs& a) {
  const int64_t n = m.numel();
  float* mv = m.f32();
  float* u = update.f32();
  const float* g = grad.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) u[i] = muon_momentum_step(g[i], mv[i], a.beta, a.nesterov, a.grad_unscale, a.grad_clip);
}

void muon_apply(const TensorView& param, const TensorView& update, float lr, float weight_decay,
                const TensorView& model_copy) {
  const int64_t n = param.numel();
  float* p = param.f32();
  const float* u = update.f32();
  const auto decay = static_cast<float>(1.0 - static_cast<double>(lr) * weight_decay);  // as AdamW's
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = muon_param(p[i], u[i], decay, lr);
  if (model_copy.data != nullptr) cast(model_copy, param);
}

// X [k, n] with k ≤ n (x itself, or its transpose when it is taller than wide) works in the
// workspace: X, the next X, A = X·Xᵀ and B [k, k].
void newton_schulz(const TensorView& x, const NewtonSchulzArgs& args, const TensorView& workspace) {
  const int64_t rows = x.dim(0), cols = x.dim(1);
  const bool transpose = rows > cols;
  const int64_t k = std::min(rows, cols), n = std::max(rows, cols);
  float* X = workspace.f32();
  float* next = X + k * n;
  float* A = next + k * n;
  float* B = A + k * k;
  const float* in = x.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) (transpose ? X[c * n + r] : X[r * n + c]) = in[r * cols + c];
  double sum = 0.0;
  for (int64_t i = 0; i < k * n; ++i) sum += static_cast<double>(X[i]) * X[i];
  const float norm = std::max(static_cast<float>(std::sqrt(sum)), args.eps);
  for (int64_t i = 0; i < k * n; ++i) X[i] /= norm;
  if (args.bf16) round_bf16(X, k * n);
  for (const NewtonSchulzStep& s : args.steps) {
    const float a = s[0], b = s[1], c = s[2];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, k, k, n, 1.0f, X, n, X, n, 0.0f, A, k);
    if (args.bf16) round_bf16(A, k * k);
    std::copy(X, X + k * n, next);
    if (c != 0.0f) {  // B = b·A + c·A·A, then X ← a·X + B·X
      std::copy(A, A + k * k, B);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, k, k, c, A, k, A, k, b, B, k);
      if (args.bf16) round_bf16(B, k * k);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, n, k, 1.0f, B, k, X, n, a, next, n);
    } else {  // X ← a·X + b·A·X
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, n, k, b, A, k, X, n, a, next, n);
    }
    if (args.bf16) round_bf16(next, k * n);
    std::swap(X, next);
  }
  float* out = x.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = transpose ? X[c * n + r] : X[r * n + c];
}

}  // namespace mt::cpu
