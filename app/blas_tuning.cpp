#include "app/blas_tuning.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace mt {

namespace {
const char* better_coretype() {
  const char* current = openblas_get_corename();
  // Only replace the generic fallback; a kernel OpenBLAS chose on purpose stays.
  if (current == nullptr || std::strcmp(current, "Prescott") != 0) return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}
}  // namespace

// Started as `ld.so ./megatron ...`, /proc/self/exe is the loader and argv is already shifted:
// re-executing would lose the program, so keep the kernels OpenBLAS chose.
bool started_through_loader() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return true;
  path[n] = '\0';
  const char* base = std::strrchr(path, '/');
  return std::strncmp(base ? base + 1 : path, "ld-", 3) == 0;
}

void retune_openblas_or_continue(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || started_through_loader()) return;
  const char* coretype = better_coretype();
  if (coretype == nullptr) return;
  setenv("OPENBLAS_CORETYPE", coretype, 1);
  execv("/proc/self/exe", argv);  // only returns on failure: then run with the generic kernels
}

}  // namespace mt
