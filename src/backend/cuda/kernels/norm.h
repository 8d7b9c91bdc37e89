// C-style launchers of the LayerNorm and RMSNorm kernels over rows of length h: raw device
// pointers, sizes and the stream. Implemented in norm.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// The scale is w + w_offset (1: zero-centred gamma).
// y = (x − mean)·rstd·(w + w_offset) (+ b when not null); writes mean[rows], rstd[rows].
void layernorm_fwd(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t rows,
                   int64_t h, float eps, float w_offset, cudaStream_t s);
// y = x·rstd·(w + w_offset); writes rstd[rows].
void rmsnorm_fwd(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t h, float eps,
                 float w_offset, cudaStream_t s);
// dx += LayerNorm's input gradient (mean null: RMSNorm's).
void norm_bwd_input(float* dx, const float* dy, const float* x, const float* w, float w_offset, const float* mean,
                    const float* rstd, int64_t rows, int64_t h, cudaStream_t s);
// dw[c] += Σ_r dy·x̂, db[c] += Σ_r dy (db may be null; mean null for RMSNorm): each column summed
// by one thread over the rows in order, in double, as the CPU does (the same bits, every run).
void norm_bwd_params(float* dw, float* db, const float* dy, const float* x, const float* mean, const float* rstd,
                     int64_t rows, int64_t h, cudaStream_t s);

}  // namespace mt::cuda::k
