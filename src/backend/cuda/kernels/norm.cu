// LayerNorm and RMSNorm CUDA kernels.  Row statistics and dinp: one block per row (grid-striding
// over rows), block reductions of per-thread strided partials (a fixed order, so the same bits
// every run; a different order from the CPU's, so within rounding of it).  Weight and bias
// gradients: one thread per column, rows in order, in double: the CPU's order, no scratch, no
// atomics.  The scale is w + wo (wo = 1: zero-centred gamma).  The per-element arithmetic is backend/math/norm_math.h's, the CPU's.
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/norm.h"
#include "backend/math/norm_math.h"

namespace mt::cuda::k {

namespace {

// Blocks for a per-row kernel: one per row, capped (the kernels stride over the rest).
int row_grid(int64_t rows) { return static_cast<int>(rows < 65536 ? rows : 65536); }

__global__ void layernorm_fwd_kernel(float* y_all, float* mean_out, float* rstd_out, const float* x_all,
                                     const float* w, const float* b, int64_t rows, int64_t h, float eps,
                                     float wo) {
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = x_all + r * h;
    float* y = y_all + r * h;
    // Two passes, as on the CPU: the mean's sum in double (a large common offset would make f32
    // partial sums large), then the squared deviations in f32.
    double sum = 0.0;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) sum += x[c];
    sum = block_sum(sum);
    const float m = static_cast<float>(sum / static_cast<double>(h));
    float sq = 0.0f;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      const float d = x[c] - m;
      sq += d * d;
    }
    sq = block_sum(sq);
    const float rs = norm_rstd(sq, inv_h, eps);
    if (threadIdx.x == 0) {
      mean_out[r] = m;
      rstd_out[r] = rs;
    }
    if (b) {
      for (int64_t c = threadIdx.x; c < h; c += blockDim.x) y[c] = layernorm_out(x[c], m, rs, w[c] + wo, b[c]);
    } else {
      for (int64_t c = threadIdx.x; c < h; c += blockDim.x) y[c] = layernorm_out(x[c], m, rs, w[c] + wo);
    }
  }
}

__global__ void rmsnorm_fwd_kernel(float* y_all, float* rstd_out, const float* x_all, const float* w, int64_t rows,
                                   int64_t h, float eps, float wo) {
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = x_all + r * h;
    float* y = y_all + r * h;
    float sq = 0.0f;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) sq += x[c] * x[c];
    sq = block_sum(sq);
    const float rs = norm_rstd(sq, inv_h, eps);
    if (threadIdx.x == 0) rstd_out[r] = rs;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) y[c] = rmsnorm_out(x[c], rs, w[c] + wo);
  }
}

__global__ void layernorm_bwd_input_kernel(float* dx_all, const float* dy_all, const float* x_all, const float* w,
                                           float wo, const float* mean, const float* rstd, int64_t rows, int64_t h) {
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = x_all + r * h;
    const float* dy = dy_all + r * h;
    float* dx = dx_all + r * h;
    const float m = mean[r], rs = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) {
      const float g = dy[c] * (w[c] + wo);
      sum_g += g;
      sum_gx += g * norm_xhat(x[c], m, rs);
    }
    sum_g = block_sum(sum_g);
    sum_gx = block_sum(sum_gx);
    const float mean_g = sum_g * inv_h, mean_gx = sum_gx * inv_h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
      dx[c] += layernorm_dinp(x[c], dy[c], w[c] + wo, m, rs, mean_g, mean_gx);
  }
}

__global__ void rmsnorm_bwd_input_kernel(float* dx_all, const float* dy_all, const float* x_all, const float* w,
                                         float wo, const float* rstd, int64_t rows, int64_t h) {
  const float inv_h = 1.0f / static_cast<float>(h);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = x_all + r * h;
    const float* dy = dy_all + r * h;
    float* dx = dx_all + r * h;
    const float rs = rstd[r];
    float sum_gx = 0.0f;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x) sum_gx += rmsnorm_gx(x[c], dy[c], w[c] + wo, rs);
    sum_gx = block_sum(sum_gx);
    const float mean_gx = sum_gx * inv_h;
    for (int64_t c = threadIdx.x; c < h; c += blockDim.x)
      dx[c] += rmsnorm_dinp(x[c], dy[c], w[c] + wo, rs, mean_gx);
  }
}

// Thread c owns column c of dw (and db): adjacent threads read adjacent columns of each row.
__global__ void norm_bwd_params_kernel(float* dw, float* db, const float* dy, const float* x, const float* mean,
                                       const float* rstd, int64_t rows, int64_t h) {
  MT_GRID_LOOP(c, h) {
    double acc_w = 0.0, acc_b = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = dy[r * h + c];
      acc_w += norm_dweight_term(g, x[r * h + c], mean ? mean[r] : 0.0f, rstd[r]);
      acc_b += static_cast<double>(g);
    }
    dw[c] += static_cast<float>(acc_w);
    if (db) db[c] += static_cast<float>(acc_b);
  }
}

// Fewer threads per block than kThreads: a hidden size of a few thousand columns then still
// spreads over many multiprocessors.
constexpr int kColumnThreads = 64;

}  // namespace

void layernorm_fwd(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t rows,
                   int64_t h, float eps, float w_offset, cudaStream_t s) {
  layernorm_fwd_kernel<<<row_grid(rows), kThreads, 0, s>>>(y, mean, rstd, x, w, b, rows, h, eps, w_offset);
}
void rmsnorm_fwd(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t h, float eps,
                 float w_offset, cudaStream_t s) {
  rmsnorm_fwd_kernel<<<row_grid(rows), kThreads, 0, s>>>(y, rstd, x, w, rows, h, eps, w_offset);
}
void norm_bwd_input(float* dx, const float* dy, const float* x, const float* w, float w_offset, const float* mean,
                    const float* rstd, int64_t rows, int64_t h, cudaStream_t s) {
  if (mean)
    layernorm_bwd_input_kernel<<<row_grid(rows), kThreads, 0, s>>>(dx, dy, x, w, w_offset, mean, rstd, rows, h);
  else
    rmsnorm_bwd_input_kernel<<<row_grid(rows), kThreads, 0, s>>>(dx, dy, x, w, w_offset, rstd, rows, h);
}
void norm_bwd_params(float* dw, float* db, const float* dy, const float* x, const float* mean, const float* rstd,
                     int64_t rows, int64_t h, cudaStream_t s) {
  const int64_t blocks = (h + kColumnThreads - 1) / kColumnThreads;
  norm_bwd_params_kernel<<<static_cast<int>(blocks < 65536 ? blocks : 65536), kColumnThreads, 0, s>>>(
      dw, db, dy, x, mean, rstd, rows, h);
}

}  // namespace mt::cuda::k
