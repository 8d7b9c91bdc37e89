// Owns the NCCL communicator (DESIGN invariant 5): collectives and messages on GPU memory through
// NCCL, bootstrapped over a host communicator (MPI, or the size-1 one), which also carries every
// host tensor (log statistics, checkpoints' agreement, serve's requests). Built only with CUDA.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace mt {

// Device tensors (Device::cuda) go through NCCL on the CUDA backend's selected GPU; host tensors
// through `host`, which must outlive the new communicator. Collective over `host`'s ranks.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);

}  // namespace mt
