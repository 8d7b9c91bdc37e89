// Owns the error boundary of every subcommand (DESIGN invariant 7): one message, exit code 1, and in
// a multi-rank job an abort that ends every rank. When every rank fails the same check (a bad flag, a
// layout the world cannot hold) the message is printed once: rank 0 prints and aborts at once, the
// other ranks wait a moment first, and speak only if the job is still alive (they failed alone).
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include "app/commands.h"
#include "base/error.h"

namespace mt {

namespace {

bool verbose_errors = false;

int report(const std::string& command, Communicator* world, const char* kind, const std::string& what,
           const std::string& where) {
  const bool several = world != nullptr && world->size() > 1;
  if (several && world->rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string rank = several && world->rank() != 0 ? "rank " + std::to_string(world->rank()) + ": " : "";
  const std::string at = verbose_errors && !where.empty() ? " [" + where + "]" : "";
  std::fprintf(stderr, "megatron %s: %s%s: %s%s\n", command.c_str(), rank.c_str(), kind, what.c_str(), at.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (several) world->abort(1);
  return 1;
}

}  // namespace

void show_error_locations(bool on) { verbose_errors = on; }

int run_or_abort(const std::string& command, Communicator* world, const std::function<int()>& command_fn) {
  try {
    return command_fn();
  } catch (const Error& e) {
    return report(command, world, "error", e.what(), e.where());
  } catch (const std::exception& e) {
    return report(command, world, "internal error", e.what(), "");
  }
}

}  // namespace mt
