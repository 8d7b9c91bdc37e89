// Owns what the CUDA backend's own sources share: error checks on runtime and cuBLASLt calls, and
// the stream every kernel of this process runs on. Included only under src/backend/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include "base/error.h"

#define MT_CUDA_CHECK(call)                                                                         \
  do {                                                                                              \
    const cudaError_t mt_cuda_status = (call);                                                     \
    MT_CHECK(mt_cuda_status == cudaSuccess) << #call << ": " << cudaGetErrorString(mt_cuda_status); \
  } while (0)

namespace mt::cuda {

// The stream of the selected device's backend (created on first use).
cudaStream_t stream();
// 4096 doubles of device scratch for reductions whose result the host reads at once (the stream
// orders its users; allocated with the backend, so kernels never allocate).
double* reduction_scratch();
constexpr int kReductionScratchDoubles = 4096;
// memmove on the device, in stream order: overlapping ranges (which cudaMemcpy leaves undefined)
// are copied in pieces no longer than the distance between them, in the safe direction.
void memmove_async(void* dst, const void* src, size_t bytes);
// Throws with the kernel's name when its launch failed (bad configuration, no device).
void check_launch(const char* kernel);

}  // namespace mt::cuda
