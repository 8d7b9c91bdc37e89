// Dropout CUDA kernels.  The forward maps one thread to one Philox block of one row, i.e. to the
// four consecutive elements whose 24-bit draws are its four words (element e of the stream is word
// e % 4 of block e / 4), so each block is generated once per row; a row's first and last blocks may
// be partly outside its range [start, start + width).  A flat tensor is one row.  The keep rule
// and scaling are dropout_math.h's, the CPU's, so masks match bit for bit.  The backward is one
// thread per element.
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

// Thread t covers Philox block t % blocks_per_row past the first block of row t / blocks_per_row.
__global__ void dropout_fwd_kernel(float* y, uint8_t* mask, const float* x, const float* res, int64_t rows,
                                   int64_t width, DropoutRows index, uint32_t threshold, float scale, uint64_t seed,
                                   uint64_t stream, int64_t blocks_per_row) {
  MT_GRID_LOOP(t, rows * blocks_per_row) {
    const int64_t r = t / blocks_per_row;
    const uint64_t start = index.row_start(r, width);
    const uint64_t block = (start >> 2) + static_cast<uint64_t>(t % blocks_per_row);
    if (block * 4 >= start + static_cast<uint64_t>(width)) continue;  // past the row's last block
    const PhiloxBlock words = philox_stream_block(seed, stream, block);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint64_t e = block * 4 + j;  // element of the stream
      if (e < start || e - start >= static_cast<uint64_t>(width)) continue;
      emit(y, mask, x, res, r * width + static_cast<int64_t>(e - start), dropout_keeps(words.w[j] >> 8, threshold),
           scale);
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

void dropout_fwd(float* y, uint8_t* mask, const float* x, const float* res, int64_t n, int64_t width, float p,
                 uint64_t seed, uint64_t stream, const DropoutRows& index, cudaStream_t s) {
  if (n == 0) return;
  if (p == 0.0f) {
    keep_all_kernel<<<grid_for(n), kThreads, 0, s>>>(y, mask, x, res, n);
    return;
  }
  // A flat tensor is one row starting where row 0 does.
  const bool flat = index.flat();
  const DropoutRows rows_index = flat ? DropoutRows(index.row_start(0, width)) : index;
  const int64_t rows = flat ? 1 : n / width, row_width = flat ? n : width;
  const int64_t blocks_per_row = (row_width + 3) / 4 + 1;  // a row spans at most this many blocks
  dropout_fwd_kernel<<<grid_for(rows * blocks_per_row), kThreads, 0, s>>>(
      y, mask, x, res, rows, row_width, rows_index, dropout_threshold(p), dropout_scale(p), seed, stream, blocks_per_row);
}

void dropout_bwd(float* dx, const float* dy, const uint8_t* mask, int64_t n, float p, cudaStream_t s) {
  dropout_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(dx, dy, mask, n, dropout_scale(p));
}

}  // namespace mt::cuda::k
