// The guard backend: mmap'd regions kept PROT_NONE outside GuardWindows (see backend/guard.h).
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/guard.h"

namespace mt {

namespace {

struct Region {
  void* base;
  size_t bytes;
};

// The guard is process-wide by nature (page protection is), so its registry is too.
struct Registry {
  std::mutex mutex;
  std::vector<Region> regions;
  int open = 0;  // nesting depth of GuardWindows

  void protect(const Region& r, int prot) {
    MT_CHECK(mprotect(r.base, r.bytes, prot) == 0) << "guard backend: mprotect failed: " << std::strerror(errno);
  }
  void protect_all(int prot) {
    for (const Region& r : regions) protect(r, prot);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

size_t page_rounded(size_t bytes) {
  const size_t page = 4096;
  return std::max<size_t>(page, (bytes + page - 1) / page * page);
}

class GuardBackend final : public Backend {
 public:
  Device device() const override { return Device::guard; }
  void* allocate(size_t bytes) override {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const Region region{nullptr, page_rounded(bytes)};
    void* p = mmap(nullptr, region.bytes, r.open ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    MT_CHECK(p != MAP_FAILED) << "guard backend: out of memory allocating " << bytes << " bytes";
    r.regions.push_back({p, region.bytes});
    return p;
  }
  void deallocate(void* ptr) override {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = std::find_if(r.regions.begin(), r.regions.end(), [&](const Region& g) { return g.base == ptr; });
    MT_CHECK(it != r.regions.end()) << "guard backend: freeing memory it does not own";
    munmap(it->base, it->bytes);
    r.regions.erase(it);
  }
  void memset_zero(void* ptr, size_t bytes) override {
    const GuardWindow open;
    std::memset(ptr, 0, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    const GuardWindow open;
    std::memcpy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    const GuardWindow open;
    std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const GuardWindow open;
    std::memmove(dst, src, bytes);
  }
  void synchronize() override {}
  int max_threads() const override { return cpu_backend().max_threads(); }
};

}  // namespace

Backend& guard_backend() {
  static GuardBackend backend;
  return backend;
}

GuardWindow::GuardWindow() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.open++ == 0) r.protect_all(PROT_READ | PROT_WRITE);
}

GuardWindow::~GuardWindow() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (--r.open == 0) r.protect_all(PROT_NONE);
}

}  // namespace mt
