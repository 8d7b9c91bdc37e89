// Owns RunContext (DESIGN invariant 9): what a run gets from the app that creates it instead of
// from globals: the job's communicator and the backend the model and optimizer allocate on.
#pragma once

#include "backend/backend.h"
#include "comm/communicator.h"

namespace mt {

struct RunContext {
  Communicator* world = nullptr;  // every rank of the job; null: this process alone
  Backend* backend = nullptr;     // where parameters, activations and optimizer state live

  // The host backend, for tools and tests that run on the CPU.
  static RunContext cpu(Communicator* world = nullptr) { return {world, &cpu_backend()}; }
};

}  // namespace mt
