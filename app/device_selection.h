// Owns --device: which backend a run uses (cpu or cuda; auto picks cuda when this build has it and a
// GPU is visible), why, and the communicator that goes with it (NCCL over the world for cuda).
#pragma once

#include <memory>
#include <string>

#include "app/options.h"
#include "backend/backend.h"
#include "comm/communicator.h"

namespace mt {

struct RunDevice {
  Device device = Device::cpu;
  Backend* backend = nullptr;
  // "device: cuda, NVIDIA H200 (...) (--device auto: built with CUDA, 1 GPU visible)": the log's first line.
  std::string summary;
  // The run's communicator: `world` itself on cpu, NCCL over it on cuda (null when world is).
  Communicator* world = nullptr;
  std::unique_ptr<Communicator> owned_world;
};

// Resolves --device (train, generate, serve) and sets up its backend; one GPU per rank, chosen by
// the rank's local index on its node (mpirun's and srun's environment).
RunDevice select_device(const Options& options, Communicator* world);
// plan's --device: the device model --search uses (a100, h100, h200 or cpu; cuda means h100, auto
// the device train would pick on this machine) and what workspaces are sized for on it. No GPU is
// touched: GPU memory is planned on any machine.
std::string planned_device_model(const Options& options);
WorkspaceTarget planned_target(const Options& options);

}  // namespace mt
