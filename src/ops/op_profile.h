// Where a step's time goes, op by op (`megatron train --profile-ops`): off unless switched on. When on,
// every routed op waits for its device before and after it runs, so device work queued by one op is
// charged to it, and the table shows each op's calls and time beside the time no op accounts for
// (host code, communication, waits). Ops called from inside another op count as the outer one.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace mt {

void set_op_profiling(bool on);
bool op_profiling();
// Forgets what was timed so far (the first iteration's warm-up, say) and restarts the wall clock.
void reset_op_profile();
// The ops by time, largest first, with their share of the wall time since the last reset.
std::string op_profile_report();

// Times one op call on `device` when profiling is on; a no-op otherwise.
class OpTimer {
 public:
  OpTimer(const char* op, Device device);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_ = nullptr;  // null: not timing this call
  bool nested_ = false;       // inside another timed op: counted in its time
  Device device_;
  double start_ = 0.0;
};

}  // namespace mt
