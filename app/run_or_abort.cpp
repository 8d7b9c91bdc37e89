// Owns the error boundary of every subcommand (DESIGN invariant 7): one message per failing rank,
// exit code 1, and in a multi-rank job an abort that ends every rank.
#include <cstdio>
#include <exception>

#include "app/commands.h"
#include "base/error.h"

namespace mt {

namespace {

int report(const std::string& command, Communicator* world, const char* kind, const char* what) {
  const bool several = world != nullptr && world->size() > 1;
  if (several)
    std::fprintf(stderr, "megatron %s: rank %d: %s: %s\n", command.c_str(), world->rank(), kind, what);
  else
    std::fprintf(stderr, "megatron %s: %s: %s\n", command.c_str(), kind, what);
  std::fflush(stderr);
  std::fflush(stdout);
  if (several) world->abort(1);
  return 1;
}

}  // namespace

int run_or_abort(const std::string& command, Communicator* world, const std::function<int()>& command_fn) {
  try {
    return command_fn();
  } catch (const Error& e) {
    return report(command, world, "error", e.what());
  } catch (const std::exception& e) {
    return report(command, world, "internal error", e.what());
  }
}

}  // namespace mt
