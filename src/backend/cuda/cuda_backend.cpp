// The CUDA backend: device memory (each Arena is one cudaMalloc, never managed memory), one stream
// per process that every kernel and copy runs on in order, and device discovery.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <sstream>

#include "backend/cuda/runtime.h"
#include "base/memory.h"

namespace mt {

namespace {

int selected_device = 0;

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    std::string why;
    MT_CHECK(cuda_device_count(&why) > 0) << "--device cuda: no usable GPU (" << why << ")";
    MT_CUDA_CHECK(cudaSetDevice(selected_device));
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    scratch_ = static_cast<double*>(allocate(cuda::kReductionScratchDoubles * sizeof(double)));
  }
  Device device() const override { return Device::cuda; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes == 0 ? 256 : bytes);
    if (status != cudaSuccess) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      MT_FAIL() << "out of GPU memory allocating " << format_bytes(bytes) << " (" << format_bytes(free_bytes)
                << " free of " << format_bytes(total) << "): " << cudaGetErrorString(status)
                << "; `megatron plan` with the same flags shows where the memory goes";
    }
    return p;
  }
  void deallocate(void* ptr) override { cudaFree(ptr); }
  void memset_zero(void* ptr, size_t bytes) override { MT_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_)); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    synchronize();  // the host reads dst next
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    synchronize();  // the caller may reuse src at once
  }
  void copy(void* dst, const void* src, size_t bytes) override { cuda::memmove_async(dst, src, bytes); }
  void synchronize() override { MT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  int max_threads() const override { return 1; }  // workspace is per device, not per host thread

  cudaStream_t stream() const { return stream_; }
  double* scratch() const { return scratch_; }

 private:
  cudaStream_t stream_ = nullptr;
  double* scratch_ = nullptr;
};

CudaBackend& the_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace

Backend& cuda_backend() { return the_backend(); }

int cuda_device_count(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // Without a driver the runtime says its version is "insufficient": name the likelier cause.
    const bool no_driver = status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice;
    if (why) *why = std::string(no_driver ? "no NVIDIA driver or GPU found; CUDA says: " : "") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return 0;
  }
  if (count == 0 && why) *why = "the CUDA runtime sees no GPU";
  return count;
}

void cuda_select_device(int index) {
  const int count = cuda_device_count();
  MT_CHECK(index >= 0 && index < count) << "GPU " << index << " requested, " << count << " visible";
  selected_device = index;
}

std::string cuda_device_description() {
  cudaDeviceProp p{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&p, selected_device));
  std::ostringstream out;
  out << p.name << " (sm_" << p.major << p.minor << ", " << format_bytes(p.totalGlobalMem) << ", "
      << p.multiProcessorCount << " SMs)";
  return out.str();
}

namespace cuda {

cudaStream_t stream() { return the_backend().stream(); }
double* reduction_scratch() { return the_backend().scratch(); }

void memmove_async(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d == s || bytes == 0) return;
  const size_t gap = d > s ? static_cast<size_t>(d - s) : static_cast<size_t>(s - d);
  if (gap >= bytes) {
    MT_CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  // Each piece's source is read before a later piece's copy can overwrite it: front to back when
  // the destination lies below the source, back to front when above.
  for (size_t done = 0; done < bytes; done += gap) {
    const size_t n = std::min(gap, bytes - done);
    const size_t at = d < s ? done : bytes - done - n;
    MT_CUDA_CHECK(cudaMemcpyAsync(d + at, s + at, n, cudaMemcpyDeviceToDevice, stream()));
  }
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  MT_CHECK(status == cudaSuccess) << kernel << ": launch failed: " << cudaGetErrorString(status);
}

}  // namespace cuda

}  // namespace mt
