// Dropout CUDA kernels.  The forward maps one thread to one Philox block, i.e. to the four
// consecutive elements whose 24-bit draws are its four words (element e of the stream is word
// e % 4 of block e / 4), so each block is generated once; the first and last blocks of the range
// may be partly outside [offset, offset + n).  The keep rule and scaling are dropout_math.h's,
// the CPU's, so masks match bit for bit.  The backward is one thread per element.
#include "backend/cuda/kernels/dropout.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/math/dropout_math.h"

namespace mt::cuda::k {

namespace {

// Element i of the tensor given its keep bit: mask, then the output when there is one.
__device__ inline void emit(float* y, uint8_t* mask, const float* x, const float* res, int64_t i, bool keep,
                            float scale) {
  mask[i] = keep ? 1 : 0;
  if (y) {
    const float v = dropout_apply(keep, x[i], scale);
    y[i] = res ? res[i] + v : v;
  }
}

// Thread t covers Philox block first_block + t.
__global__ void dropout_fwd_kernel(float* y, uint8_t* mask, const float* x, const float* res, int64_t n,
                                   uint32_t threshold, float scale, uint64_t seed, uint64_t stream,
                                   uint64_t offset, int64_t blocks) {
  const uint64_t first_block = offset >> 2;
  MT_GRID_LOOP(t, blocks) {
    const uint64_t block = first_block + static_cast<uint64_t>(t);
    const PhiloxBlock words = philox_stream_block(seed, stream, block);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint64_t e = block * 4 + j;  // element of the stream
      if (e < offset || e - offset >= static_cast<uint64_t>(n)) continue;
      emit(y, mask, x, res, static_cast<int64_t>(e - offset), dropout_keeps(words.w[j] >> 8, threshold), scale);
    }
  }
}

// p == 0: everything kept, scale 1 (the CPU then copies rather than multiplies; x·1 = x anyway).
__global__ void keep_all_kernel(float* y, uint8_t* mask, const float* x, const float* res, int64_t n) {
  MT_GRID_LOOP(i, n) {
    mask[i] = 1;
    if (y) y[i] = res ? res[i] + x[i] : x[i];
  }
}

__global__ void dropout_bwd_kernel(float* dx, const float* dy, const uint8_t* mask, int64_t n, float scale) {
  MT_GRID_LOOP(i, n) dx[i] += dropout_apply(mask[i] != 0, dy[i], scale);
}

}  // namespace

void dropout_fwd(float* y, uint8_t* mask, const float* x, const float* res, int64_t n, float p, uint64_t seed,
                 uint64_t stream, uint64_t offset, cudaStream_t s) {
  if (p == 0.0f) {
    keep_all_kernel<<<grid_for(n), kThreads, 0, s>>>(y, mask, x, res, n);
    return;
  }
  const uint64_t last = offset + static_cast<uint64_t>(n) - 1;
  const int64_t blocks = static_cast<int64_t>((last >> 2) - (offset >> 2) + 1);
  dropout_fwd_kernel<<<grid_for(blocks), kThreads, 0, s>>>(y, mask, x, res, n, dropout_threshold(p),
                                                           dropout_scale(p), seed, stream, offset, blocks);
}

void dropout_bwd(float* dx, const float* dy, const uint8_t* mask, int64_t n, float p, cudaStream_t s) {
  dropout_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(dx, dy, mask, n, dropout_scale(p));
}

}  // namespace mt::cuda::k
