// Owns the schedule simulator: runs every rank's action list in lock-step against a rendezvous
// communicator and checks the rules a pipeline executor relies on, so a generated (or
// hand-written) schedule is proven before any rank runs it; the trainer can call it at startup.
//
// Model: in each tick, first every rank runs its exchanges as far as it can (an exchange posts all
// its sends and receives at once and completes only when each send has its matching receive
// posted by the peer and each receive its matching send: nothing is buffered), then every rank
// whose next action is a compute runs it (one per tick). Messages of one (source, destination,
// direction) match in FIFO order. No rank able to move is a deadlock.
//
// Checks: each matched send and receive name the same tensor (direction, micro-batch, producing
// virtual stage); peers and stages are the ones the partition implies (rank r holds virtual
// stages c·pp + r); a tensor is sent after the compute that produces it, only once, and before that
// chunk computes again (the executor sends from the chunk's own buffers, which the next compute
// overwrites); a forward
// on a non-first virtual stage has received its input activation, a backward on a non-last one its
// output gradient; each (micro-batch, chunk) forward and backward runs exactly once, the backward
// after the forward (forward-only: no backward); nothing is left unsent or unconsumed at the end.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace mt {

struct SimulationReport {
  bool ok = true;
  std::string error;            // the first problem found (deadlock or broken rule); empty when ok
  int ticks = 0;                // ticks until every list ended (or the failure)
  std::vector<int> busy_ticks;  // per rank: ticks it spent computing (idle = ticks - busy)
};

// Runs `ranks` (one action list per pipeline rank, config.pp of them) for the pipeline `config`
// describes (pp, vp, micro-batches, forward_only; the group size is not needed).
SimulationReport simulate(const ScheduleConfig& config, const std::vector<std::vector<Action>>& ranks);

// Simulates `schedule` and throws mt::Error with the simulator's finding when it fails.
void check_schedule(const Schedule& schedule);

}  // namespace mt
