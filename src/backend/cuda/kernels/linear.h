// C-style launcher of the linear op's own kernel (the GEMMs go to cuBLASLt): the bias gradient.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// dbias[c] += Σ_r dout[r, c] for a row-major dout[rows, cols]; one thread per column, rows in
// order (deterministic, coalesced across the warp).
void bias_grad(float* dbias, const float* dout, int64_t rows, int64_t cols, cudaStream_t s);

}  // namespace mt::cuda::k
