#include "app/device_selection.h"

#include <cstdlib>

#include "base/error.h"
#if MT_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "comm/nccl_communicator.h"
#endif

namespace mt {

namespace {

// This rank's index among the ranks of its node, from the launcher (0 when launched alone).
int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return 0;
}

struct Resolved {
  Device device;
  std::string why;
};

Resolved resolve(const Options& options) {
  const std::string asked = options.text("--device");
#if MT_HAVE_CUDA
  std::string no_gpu;
  const int gpus = cuda_device_count(&no_gpu);
  const std::string visible = std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs") + " visible";
  if (asked == "cpu") return {Device::cpu, "--device cpu"};
  if (asked == "cuda") {
    MT_CHECK(gpus > 0) << "--device cuda: no usable GPU (" << no_gpu << "); run with --device cpu";
    return {Device::cuda, "--device cuda, " + visible};
  }
  if (gpus > 0) return {Device::cuda, "--device auto: built with CUDA, " + visible};
  return {Device::cpu, "--device auto: built with CUDA, but no usable GPU (" + no_gpu + ")"};
#else
  MT_CHECK(asked != "cuda") << "--device cuda: this build has no CUDA backend; rebuild with -DMT_CUDA=on (needs the "
                            << "CUDA toolkit, see scripts/install-deps.sh) or run with --device cpu";
  return {Device::cpu, asked == "cpu" ? "--device cpu" : "--device auto: built without CUDA"};
#endif
}

}  // namespace

RunDevice select_device(const Options& options, Communicator* world) {
  const Resolved r = resolve(options);
  RunDevice d;
  d.device = r.device;
  d.world = world;
  if (r.device == Device::cpu) {
    d.backend = &cpu_backend();
    d.summary = "device: cpu (" + r.why + ")";
    return d;
  }
#if MT_HAVE_CUDA
  cuda_select_device(local_rank() % cuda_device_count());
  d.backend = &cuda_backend();
  d.summary = "device: cuda, " + cuda_device_description() + " (" + r.why + ")";
  if (world) {
    d.owned_world = make_nccl_communicator(*world);
    d.world = d.owned_world.get();
  }
#endif
  return d;
}

std::string planned_device_model(const Options& options) {
  const std::string& name = options.text("--device");
  if (name == "auto") return resolve(options).device == Device::cpu ? "cpu" : "h100";
  return name == "cuda" ? "h100" : name;
}

WorkspaceTarget planned_target(const Options& options) {
  if (planned_device_model(options) == "cpu") return {Device::cpu, cpu_backend().max_threads()};
  return {Device::cuda, 1};  // the CUDA backend's max_threads()
}

}  // namespace mt
