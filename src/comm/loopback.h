// Owns Loopback: the messages a rank sends to itself, shared by every Communicator implementation so
// self-messages behave alike everywhere (communicator.h states the rules). A send is copied at once
// (or straight into a receive posted earlier), so it never blocks; a blocking receive, or a wait(), that
// only a later send could satisfy is an error, never a hang.
// Not thread-safe: like MPI_THREAD_FUNNELED, only one thread communicates.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace mt {

struct LoopbackState;

class Loopback {
 public:
  Loopback();
  ~Loopback();
  Loopback(const Loopback&) = delete;
  Loopback& operator=(const Loopback&) = delete;

  // `rank` (this rank) and `op` only name the call in error messages; the caller checked the arguments.
  // A send that fills a posted receive of another size throws, naming that receive.
  void send(const TensorView& t, int rank, int tag);
  void recv(const TensorView& t, int rank, int tag, const char* op);
  // Filled now from the queue, or by the next matching send; wait() throws if neither happened.
  std::unique_ptr<CommRequest> recv_async(const TensorView& t, int rank, int tag, const char* op);

 private:
  // Shared with pending receive requests, which may outlive the communicator.
  std::shared_ptr<LoopbackState> state_;
};

}  // namespace mt
