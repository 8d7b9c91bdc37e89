// The subcommands main() dispatches to. Each returns the exit code and throws mt::Error on bad
// input; main() prints it and, in a multi-rank job, aborts every rank.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mt {

// world: every rank of the job (null: this process alone, as in tests).
int cmd_train(const std::vector<std::string>& args, Communicator* world = nullptr);

}  // namespace mt
