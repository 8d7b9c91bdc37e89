#include "train/exit_signal.h"

#include <cstring>

#include "base/error.h"

namespace mt {

namespace {
volatile std::sig_atomic_t g_received = 0;
extern "C" void record_exit_signal(int) { g_received = 1; }  // async-signal-safe: a flag only
}  // namespace

ExitSignalScope::ExitSignalScope(int signal) : signal_(signal) {
  g_received = 0;
  struct sigaction action{};
  action.sa_handler = record_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls (MPI, file writes) carry on
  MT_CHECK(sigaction(signal_, &action, &previous_) == 0)
      << "--exit-signal " << signal_ << " cannot be handled: " << std::strerror(errno);
}

ExitSignalScope::~ExitSignalScope() { sigaction(signal_, &previous_, nullptr); }

bool ExitSignalScope::received() const { return g_received != 0; }

}  // namespace mt
