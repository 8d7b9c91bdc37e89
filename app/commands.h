// The subcommands main() dispatches to. Each returns the exit code and throws mt::Error on bad
// input; main() prints it and, in a multi-rank job, aborts every rank.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mt {

// world: every rank of the job (null: this process alone, as in tests).
int cmd_train(const std::vector<std::string>& args, Communicator* world = nullptr);
// JSON lines to .bin/.idx (tools/preprocess_data.py), or --merge (tools/merge_datasets.py).
int cmd_preprocess(const std::vector<std::string>& args);
// Continue prompts with a checkpoint's model (Megatron's inference scripts); the ranks of `world` form
// one tensor-parallel group.
int cmd_generate(const std::vector<std::string>& args, Communicator* world = nullptr);
// Megatron's text generation server (PUT /api) and OpenAI-style completions over HTTP; the ranks of
// `world` form one tensor-parallel group, rank 0 listening.
int cmd_serve(const std::vector<std::string>& args, Communicator* world = nullptr);
// What a train command line would reserve per rank, compute and idle, from the flags alone.
int cmd_plan(const std::vector<std::string>& args);
// Every flag of Megatron-LM's training parser and its status here (--markdown: docs/megatron-flags.md).
int cmd_flags(const std::vector<std::string>& args);
// Checkpoints to and from Hugging Face, and offline resharding (tools/checkpoint/convert.py).
// One process: under mpirun with several ranks it refuses rather than write the same files twice.
int cmd_convert(const std::vector<std::string>& args, Communicator* world = nullptr);

// Runs `command_fn` and returns its exit code. An mt::Error (or any exception) is printed as
// "megatron <command>: error: ..." (once, by rank 0, when every rank fails; with the failing rank
// when one fails alone) and ends the process with 1; with several ranks it aborts the whole job, so
// no rank hangs in a collective.
int run_or_abort(const std::string& command, Communicator* world, const std::function<int()>& command_fn);
// `megatron --verbose ...`: error messages end with the source location and failed check.
void show_error_locations(bool on);

}  // namespace mt
