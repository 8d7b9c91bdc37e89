// Owns the host side of the device id range check (labels, token and position ids): the CPU
// kernels throw naming the first id out of range, and the CUDA entry points do the same.
#pragma once

#include <cstdint>

namespace mt::cuda {

// The first k < n with ids[k] (device memory) outside [0, limit), or -1; *value gets ids[k].
// Waits for the stream: the caller throws before any kernel indexes with a bad id.
int64_t first_id_out_of_range(const int32_t* ids, int64_t n, int64_t limit, int32_t* value);

}  // namespace mt::cuda
