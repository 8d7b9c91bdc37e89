// Owns --exit-signal-handler's signal: while a scope lives, the signal (SIGTERM by default,
// --exit-signal) only records that it arrived; the trainer then asks every rank, once per
// iteration, whether any received it, saves a checkpoint and exits cleanly (Megatron's
// DistributedSignalHandler). The previous disposition comes back when the scope ends.
#pragma once

#include <csignal>

namespace mt {

class ExitSignalScope {
 public:
  explicit ExitSignalScope(int signal);
  ~ExitSignalScope();
  ExitSignalScope(const ExitSignalScope&) = delete;
  ExitSignalScope& operator=(const ExitSignalScope&) = delete;

  bool received() const;  // on this process, since the scope began

 private:
  int signal_;
  struct sigaction previous_{};
};

}  // namespace mt
