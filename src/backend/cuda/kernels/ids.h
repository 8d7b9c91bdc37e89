// C-style launcher of the id range check that the cross-entropy and embedding entry points run
// before they index with labels or token ids. Implemented in ids.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mt::cuda::k {

// *first = min(*first, k) over every k < n with ids[k] outside [0, limit); *first must hold
// UINT64_MAX before (an integer atomic min: the same answer whatever the thread order).
void first_out_of_range(unsigned long long* first, const int32_t* ids, int64_t n, int64_t limit, cudaStream_t s);

}  // namespace mt::cuda::k
