// Owns the guard backend: host memory that only backend calls may touch (DESIGN invariant 4).
// Its pages stay PROT_NONE except while a GuardWindow is open: inside an op, a backend copy or a
// collective. So any host-side read or write of a device tensor from model/, train/, infer/,
// optim/ or parallel/ crashes the test that made it, on a machine without a GPU. The kernels are
// the CPU backend's, so results equal a CPU run's bit for bit.
#pragma once

#include "backend/backend.h"

namespace mt {

Backend& guard_backend();

// Opens every guard page for reading and writing while it lives (nests; process-wide).
class GuardWindow {
 public:
  GuardWindow();
  ~GuardWindow();
  GuardWindow(const GuardWindow&) = delete;
  GuardWindow& operator=(const GuardWindow&) = delete;
};

}  // namespace mt
