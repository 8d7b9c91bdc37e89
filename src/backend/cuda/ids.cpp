// The device id range check (ids.h): the kernel of kernels/ids.cu into the reduction scratch,
// then one small read back.
#include "backend/cuda/ids.h"

#include "backend/cuda/kernels/ids.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

int64_t first_id_out_of_range(const int32_t* ids, int64_t n, int64_t limit, int32_t* value) {
  if (n == 0) return -1;
  auto* first = reinterpret_cast<unsigned long long*>(reduction_scratch());
  MT_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof *first, stream()));
  k::first_out_of_range(first, ids, n, limit, stream());
  check_launch("id range check");
  unsigned long long k = 0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&k, first, sizeof k, cudaMemcpyDeviceToHost, stream()));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  if (k == ~0ull) return -1;
  MT_CUDA_CHECK(cudaMemcpyAsync(value, ids + k, sizeof *value, cudaMemcpyDeviceToHost, stream()));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return static_cast<int64_t>(k);
}

}  // namespace mt::cuda
