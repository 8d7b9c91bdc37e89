// megatron: subcommand dispatch. Every mt::Error ends here as one message and exit code 1; in a
// job started by mpirun or srun the failing rank then aborts the whole job, so no rank is left
// waiting in a collective.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "app/commands.h"
#include "app/launch_check.h"
#include "base/error.h"
#include "comm/mpi_communicator.h"

namespace {
const char* kUsage =
    "usage: megatron <command> [options]\n"
    "\n"
    "commands:\n"
    "  train        train a GPT model (megatron train --help for its options)\n"
    "  preprocess   tokenize JSON lines into .bin/.idx datasets, or merge datasets\n"
    "  generate     continue prompts with a trained model (KV cache, sampling, tensor parallel)\n"
    "  serve        answer generation requests over HTTP (Megatron's /api, OpenAI completions)\n"
    "  convert      checkpoints to and from Hugging Face models, or into another parallel layout\n"
    "  plan         memory and traffic per rank, FLOPs and bubble of a train command line, without running it;\n"
    "               --search: the layouts that fit a memory budget, fastest first\n"
    "  flags        every flag of Megatron-LM's training parser: implemented, accepted without effect, or not\n"
    "\n"
    "--verbose (with any command): errors also name their source location\n";

// Set by mpirun (Open MPI, MPICH/Hydra) or srun (PMI, PMIx): this process is one rank of a job.
bool launched_as_mpi_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  // --verbose, anywhere: errors name their source location (for bug reports).
  if (const auto v = std::find(args.begin(), args.end(), "--verbose"); v != args.end()) {
    args.erase(v);
    mt::show_error_locations(true);
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  std::unique_ptr<mt::Communicator> world;
  const int rc = mt::run_or_abort(command, nullptr, [&] {
    if (launched_as_mpi_rank()) {
      world = mt::make_mpi_world_communicator();
    } else {
      mt::check_launcher_started_one_process([](const char* name) { return std::getenv(name); });
      world = mt::make_self_communicator();
    }
    return 0;
  });
  if (rc != 0) return rc;
  return mt::run_or_abort(command, world.get(), [&] {
    if (command == "train") return mt::cmd_train(args, world.get());
    if (command == "preprocess") return mt::cmd_preprocess(args);
    if (command == "generate") return mt::cmd_generate(args, world.get());
    if (command == "serve") return mt::cmd_serve(args, world.get());
    if (command == "convert") return mt::cmd_convert(args, world.get());
    if (command == "plan") return mt::cmd_plan(args);
    if (command == "flags") return mt::cmd_flags(args);
    std::fprintf(stderr, "megatron: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  });
}
