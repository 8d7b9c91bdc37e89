// C-style launchers of the dropout kernels: raw device pointers, sizes, the Philox stream
// (seed, stream) and the stream. Implemented in dropout.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/dropout_args.h"

namespace mt::cuda::k {

// n elements in rows of `width`: mask[i] = keep(i) as 0/1 with keep(i) = philox_bits24(seed, stream,
// index of element i under `index`) >= threshold (base/philox.h, the CPU's rule); y[i] = (res ?
// res[i] : 0) + dropout_apply(keep, x[i], scale), skipped when y is null (the mask alone). p == 0
// keeps everything and draws nothing.
void dropout_fwd(float* y, uint8_t* mask, const float* x, const float* res, int64_t n, int64_t width, float p,
                 uint64_t seed, uint64_t stream, const DropoutRows& index, cudaStream_t s);
// dx[i] += mask[i] ? dy[i] / (1 − p) : 0.
void dropout_bwd(float* dx, const float* dy, const uint8_t* mask, int64_t n, float p, cudaStream_t s);

}  // namespace mt::cuda::k
