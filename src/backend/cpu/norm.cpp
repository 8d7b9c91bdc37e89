// CPU kernels for LayerNorm and RMSNorm, over the per-element arithmetic of
// backend/math/norm_math.h (shared with the CUDA kernels).  Per-row work (statistics, dinp) is
// parallel over rows; the weight/bias gradients sum over rows, so they are parallel over column
// blocks instead: each column is summed by one thread in row order, in double, which is race-free
// and gives the same bits for any thread count.
#include "backend/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "backend/math/norm_math.h"

namespace mt::cpu {

namespace {

constexpr int64_t kColBlock = 32;

// dweight[c] += Σ_r dout[r, c]·x̂[r, c] and dbias[c] += Σ_r dout[r, c] (when dbias is not null),
// with x̂ = (x − mean[r])·rstd[r] (mean null for RMSNorm).
void norm_param_grads(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                      const float* rstd, int64_t rows, int64_t h) {
  const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, nc = std::min(kColBlock, h - c0);
    double acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float* x = inp + r * h + c0;
      const float* dy = dout + r * h + c0;
      const float m = mean ? mean[r] : 0.0f, rs = rstd[r];
#pragma omp simd
      for (int64_t c = 0; c < nc; ++c) {
        acc_w[c] += norm_dweight_term(dy[c], x[c], m, rs);
        acc_b[c] += static_cast<double>(dy[c]);
      }
    }
    for (int64_t c = 0; c < nc; ++c) dweight[c0 + c] += static_cast<float>(acc_w[c]);
    if (dbias)
      for (int64_t c = 0; c < nc; ++c) dbias[c0 + c] += static_cast<float>(acc_b[c]);
  }
}

}  // namespace

void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = h ? inp.numel() / h : 0;
  const float* x_all = inp.f32();
  const float* w = weight.f32();
  const float* b = bias.empty() ? nullptr : bias.f32();
  float* y_all = out.f32();
  float* mean_out = mean.f32();
  float* rstd_out = rstd.f32();
  const float inv_h = 1.0f / static_cast<float>(h);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * h;
    float* y = y_all + r * h;
    // Two passes (mean, then squared deviations) so a large common offset does not cancel; the
    // mean's sum runs in double lanes because an offset makes its f32 partial sums large.
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < h; ++c) sum += x[c];
    const float m = static_cast<float>(sum / static_cast<double>(h));
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < h; ++c) {
      const float d = x[c] - m;
      sq += d * d;
    }
    const float rs = norm_rstd(sq, inv_h, eps);
    mean_out[r] = m;
    rstd_out[r] = rs;
    if (b) {
#pragma omp simd
      for (int64_t c = 0; c < h; ++c) y[c] = layernorm_out(x[c], m, rs, w[c] + weight_offset, b[c]);
    } else {
#pragma omp simd
      for (int64_t c = 0; c < h; ++c) y[c] = layernorm_out(x[c], m, rs, w[c] + weight_offset);
    }
  }
}

void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = h ? inp.numel() / h : 0;
  const float* x_all = inp.f32();
  const float* dy_all = dout.f32();
  const float* w = weight.f32();
  const float* mean_in = mean.f32();
  const float* rstd_in = rstd.f32();
  float* dx_all = dinp.f32();
  // Parameter gradients first: they read only dout, inp and the statistics.
  norm_param_grads(dweight.f32(), dbias.empty() ? nullptr : dbias.f32(), dy_all, x_all, mean_in, rstd_in, rows, h);
  const float inv_h = 1.0f / static_cast<float>(h);
  // With g = dout·w and x̂ the normalised input:
  //   dinp = rstd · (g − mean(g) − x̂ · mean(g·x̂))
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * h;
    const float* dy = dy_all + r * h;
    float* dx = dx_all + r * h;
    const float m = mean_in[r], rs = rstd_in[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t c = 0; c < h; ++c) {
      const float g = dy[c] * (w[c] + weight_offset);
      sum_g += g;
      sum_gx += g * norm_xhat(x[c], m, rs);
    }
    const float mean_g = sum_g * inv_h, mean_gx = sum_gx * inv_h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c)
      dx[c] += layernorm_dinp(x[c], dy[c], w[c] + weight_offset, m, rs, mean_g, mean_gx);
  }
}

void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = h ? inp.numel() / h : 0;
  const float* x_all = inp.f32();
  const float* w = weight.f32();
  float* y_all = out.f32();
  float* rstd_out = rstd.f32();
  const float inv_h = 1.0f / static_cast<float>(h);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * h;
    float* y = y_all + r * h;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < h; ++c) sq += x[c] * x[c];
    const float rs = norm_rstd(sq, inv_h, eps);
    rstd_out[r] = rs;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) y[c] = rmsnorm_out(x[c], rs, w[c] + weight_offset);
  }
}

void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = h ? inp.numel() / h : 0;
  const float* x_all = inp.f32();
  const float* dy_all = dout.f32();
  const float* w = weight.f32();
  const float* rstd_in = rstd.f32();
  float* dx_all = dinp.f32();
  norm_param_grads(dweight.f32(), nullptr, dy_all, x_all, nullptr, rstd_in, rows, h);
  const float inv_h = 1.0f / static_cast<float>(h);
  // With g = dout·w and x̂ = x·rstd:  dinp = rstd · (g − x̂ · mean(g·x̂))
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_all + r * h;
    const float* dy = dy_all + r * h;
    float* dx = dx_all + r * h;
    const float rs = rstd_in[r];
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t c = 0; c < h; ++c) sum_gx += rmsnorm_gx(x[c], dy[c], w[c] + weight_offset, rs);
    const float mean_gx = sum_gx * inv_h;
#pragma omp simd
    for (int64_t c = 0; c < h; ++c) dx[c] += rmsnorm_dinp(x[c], dy[c], w[c] + weight_offset, rs, mean_gx);
  }
}

}  // namespace mt::cpu
