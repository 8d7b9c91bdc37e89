// megatron: subcommand dispatch. Every mt::Error ends here as one message and exit code 1; in a
// job started by mpirun or srun the failing rank then aborts the whole job, so no rank is left
// waiting in a collective.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "app/commands.h"
#include "base/error.h"
#include "comm/mpi_communicator.h"

namespace {
const char* kUsage =
    "usage: megatron <command> [options]\n"
    "\n"
    "commands:\n"
    "  train    train a GPT model (megatron train --help for its options)\n";

// Set by mpirun (Open MPI, MPICH/Hydra) or srun (PMI, PMIx): this process is one rank of a job.
bool launched_as_mpi_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

// Prints the error once per failing rank and ends the job: every rank when several run.
int fail(const std::string& command, const char* kind, const char* what, mt::Communicator* world) {
  if (world == nullptr || world->size() == 1) {
    std::fprintf(stderr, "megatron %s: %s: %s\n", command.c_str(), kind, what);
    return 1;
  }
  std::fprintf(stderr, "megatron %s: rank %d: %s: %s\n", command.c_str(), world->rank(), kind, what);
  std::fflush(stderr);
  world->abort(1);
  return 1;  // not reached
}
}

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  std::unique_ptr<mt::Communicator> world;
  try {
    world = launched_as_mpi_rank() ? mt::make_mpi_world_communicator() : mt::make_self_communicator();
    if (command == "train") return mt::cmd_train(args, world.get());
    std::fprintf(stderr, "megatron: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const mt::Error& e) {
    return fail(command, "error", e.what(), world.get());
  } catch (const std::exception& e) {
    return fail(command, "internal error", e.what(), world.get());
  }
}
