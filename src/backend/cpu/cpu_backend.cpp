// The CPU backend: host memory, 64-byte aligned.
#include <cstdlib>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"

namespace mt {

namespace {
class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    MT_CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
    return p;
  }
  void deallocate(void* ptr) override { std::free(ptr); }
  void memset_zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void synchronize() override {}
  int max_threads() const override {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
  }
};
}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace mt
