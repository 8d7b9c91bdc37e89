// CPU kernels for the fused softmax cross entropy, over the arithmetic of
// backend/math/cross_entropy_math.h (shared with the CUDA kernels).  Forward: two passes per row
// (max, then Σ exp), exp evaluated once per element by the vectorised exp_f32; backward: one pass
// per row writing dlosses·(exp(x − lse) − onehot), element by element, so dlogits may overwrite
// logits in place.
#include "backend/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/math/cross_entropy_math.h"

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

// The ternary (not std::max, which GCC turns into a slow dependent chain here) vectorises to
// vmaxps; a NaN logit is skipped by the max but still poisons the sum, as it should.
float row_max_of(const float* x, int64_t vocab) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t v = 0; v < vocab; ++v) mx = ce_max(x[v], mx);
  return mx;
}

double sum_exp_of(const float* x, int64_t vocab, float mx) {
  double sum = 0.0;
  for (int64_t v0 = 0; v0 < vocab; v0 += kSumBlock) {
    const int64_t v1 = std::min(vocab, v0 + kSumBlock);
    float block = 0.0f;
#pragma omp simd reduction(+ : block)
    for (int64_t v = v0; v < v1; ++v) block += ce_exp(x[v], mx);
    sum += block;
  }
  return sum;
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
    const float mx = row_max_of(x, vocab);
    const double row_lse = ce_lse(mx, sum_exp_of(x, vocab, mx));
    lse_out[r] = static_cast<float>(row_lse);
    loss[r] = ce_loss(row_lse, x[lab[r]]);
  }
}

void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels) {
  check_labels(labels, logits.dim(1), "cross_entropy_bwd");
  cross_entropy_shard_bwd(dlogits, dlosses, logits, lse, labels, 0);
}

void cross_entropy_shard_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                             const TensorView& lse, const TensorView& labels, int64_t vocab_start) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
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
    for (int64_t v = 0; v < vocab; ++v) g[v] = ce_grad(d, x[v], l);
    const int64_t t = lab[r] - vocab_start;
    if (t >= 0 && t < vocab) g[t] -= d;
  }
}

void cross_entropy_shard_max(const TensorView& row_max, const TensorView& logits) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const float* x_all = logits.f32();
  float* out = row_max.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) out[r] = row_max_of(x_all + r * vocab, vocab);
}

void cross_entropy_shard_sums(const TensorView& sum_exp, const TensorView& target, const TensorView& logits,
                              const TensorView& labels, const TensorView& row_max, int64_t vocab_start) {
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  const float* x_all = logits.f32();
  const int32_t* lab = labels.i32();
  const float* mx = row_max.f32();
  float* sums = sum_exp.f32();
  float* tgt = target.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * vocab;
    sums[r] = static_cast<float>(sum_exp_of(x, vocab, mx[r]));
    const int64_t t = lab[r] - vocab_start;
    tgt[r] = t >= 0 && t < vocab ? x[t] : 0.0f;
  }
}

void cross_entropy_shard_loss(const TensorView& losses, const TensorView& lse, const TensorView& row_max,
                              const TensorView& sum_exp, const TensorView& target) {
  const int64_t rows = losses.numel();
  const float *mx = row_max.f32(), *sum = sum_exp.f32(), *tgt = target.f32();
  float *lse_out = lse.f32(), *loss = losses.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const double row_lse = ce_lse(mx[r], static_cast<double>(sum[r]));
    lse_out[r] = static_cast<float>(row_lse);
    loss[r] = ce_loss(row_lse, tgt[r]);
  }
}

}  // namespace mt::cpu
