// Routes a device to the backend that owns its memory.
#include "backend/backend.h"

#include "backend/guard.h"
#if MT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace mt {

Backend& backend_for(Device device) {
  switch (device) {
    case Device::cpu: return cpu_backend();
    case Device::guard: return guard_backend();
    case Device::cuda:
#if MT_HAVE_CUDA
      return cuda_backend();
#else
      break;
#endif
  }
  MT_FAIL() << "this build has no CUDA backend; rebuild with -DMT_CUDA=ON (the CUDA toolkit must be installed)";
}

void zero(const TensorView& t) {
  if (!t.empty()) backend_for(t.device).memset_zero(t.data, t.bytes());
}

}  // namespace mt
