// CPU kernels for the fused softmax cross entropy.  Forward: two passes per row (max, then Σ exp),
// exp evaluated once per element by the vectorised exp_f32; backward: one pass per row writing
// dlosses·(exp(x − lse) − onehot), element by element, so dlogits may overwrite logits in place.
#include "backend/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/elementwise.h"

namespace mt::cpu {

namespace {

// Σ exp in float lanes over blocks of this many elements, block sums in double: rounding error
// stays ~1e−7 relative even for V in the hundreds of thousands.
constexpr int64_t kSumBlock = 1024;

void check_labels(const TensorView& labels, int64_t vocab, const char* op) {
  const int32_t* lab = labels.i32();
  const int64_t n = labels.numel();
  for (int64_t r = 0; r < n; ++r)
    if (lab[r] < 0 || lab[r] >= vocab)
      MT_FAIL() << op << ": labels[" << r << "] = " << lab[r] << " is out of range [0, " << vocab
                << ") (vocabulary size of the logits)";
}

}  // namespace

void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check_labels(labels, vocab, "cross_entropy_fwd");
  const float* x_all = logits.f32();
  const int32_t* lab = labels.i32();
  float* loss = losses.f32();
  float* lse_out = lse.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * vocab;
    float mx = -std::numeric_limits<float>::infinity();
    // The ternary (not std::max, which GCC turns into a slow dependent chain here) vectorises to
    // vmaxps; a NaN logit is skipped by the max but still poisons the sum below, as it should.
#pragma omp simd reduction(max : mx)
    for (int64_t v = 0; v < vocab; ++v) mx = x[v] > mx ? x[v] : mx;
    double sum = 0.0;
    for (int64_t v0 = 0; v0 < vocab; v0 += kSumBlock) {
      const int64_t v1 = std::min(vocab, v0 + kSumBlock);
      float block = 0.0f;
#pragma omp simd reduction(+ : block)
      for (int64_t v = v0; v < v1; ++v) block += exp_f32(x[v] - mx);
      sum += block;
    }
    const double row_lse = static_cast<double>(mx) + std::log(sum);
    lse_out[r] = static_cast<float>(row_lse);
    loss[r] = static_cast<float>(row_lse - static_cast<double>(x[lab[r]]));
  }
}

void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check_labels(labels, vocab, "cross_entropy_bwd");
  // No __restrict here: x and g may be the same row, which the per-element loop allows.
  const float* x_all = logits.f32();
  float* g_all = dlogits.f32();
  const float* dloss = dlosses.f32();
  const float* lse_in = lse.f32();
  const int32_t* lab = labels.i32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * vocab;
    float* g = g_all + r * vocab;
    const float d = dloss[r], l = lse_in[r];
    if (d == 0.0f) {  // masked token: the gradient is exactly zero, skip the exps
      std::fill(g, g + vocab, 0.0f);
      continue;
    }
#pragma omp simd
    for (int64_t v = 0; v < vocab; ++v) g[v] = d * exp_f32(x[v] - l);
    g[lab[r]] -= d;
  }
}

}  // namespace mt::cpu
