// Owns the device interface: memory and copies for one device. Ops route to the backend that owns
// their tensors' memory (see ops/); only backend/cuda/ will ever see CUDA headers.
#pragma once

#include <cstddef>

#include "tensor/tensor.h"

namespace mt {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Aligned to at least 64 bytes; throws mt::Error when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void memset_zero(void* ptr, size_t bytes) = 0;
  // Copies between this device and host, or within this device.
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Threads one kernel may use (workspaces that hold per-thread scratch are sized for it).
  virtual int max_threads() const { return 1; }
};

// What per-thread scratch (the attention backward's workspace) is sized for: the device whose
// kernels use it and the threads one kernel may use there.
struct WorkspaceTarget {
  Device device = Device::cpu;
  int threads = 1;
};

// The process-wide CPU backend (stateless, so sharing it keeps invariant 8).
Backend& cpu_backend();
// The backend owning memory on `device`; mt::Error when this build has none for it.
Backend& backend_for(Device device);

// Zero a tensor wherever it lives.
void zero(const TensorView& t);

}  // namespace mt
