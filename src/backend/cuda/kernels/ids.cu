// The id range check: one thread per id, the first offender found by an integer atomic min.
#include "backend/cuda/kernels/ids.h"
#include "backend/cuda/kernels/launch.cuh"

namespace mt::cuda::k {

namespace {

__global__ void first_out_of_range_kernel(unsigned long long* first, const int32_t* ids, int64_t n, int64_t limit) {
  MT_GRID_LOOP(k, n) {
    const int64_t id = ids[k];
    if (id < 0 || id >= limit) atomicMin(first, static_cast<unsigned long long>(k));
  }
}

}  // namespace

void first_out_of_range(unsigned long long* first, const int32_t* ids, int64_t n, int64_t limit, cudaStream_t s) {
  first_out_of_range_kernel<<<grid_for(n), kThreads, 0, s>>>(first, ids, n, limit);
}

}  // namespace mt::cuda::k
