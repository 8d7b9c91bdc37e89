// Owns the Communicator interface (DESIGN invariant 5): the collectives the parallel layers, the
// optimizer, the pipeline and checkpoints use, and the tagged point-to-point messages the pipeline
// schedules use, on host tensors (guard tensors too: comm/host_access.h), in blocking and
// non-blocking form, plus split (sub-groups by role) and abort (every rank exits, nobody hangs).
// Implementations: the size-1 one here, MPI in mpi_communicator.h; a counting wrapper for tests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "tensor/tensor.h"

namespace mt {

// avg: the sum divided by size() (NCCL's ncclAvg; over MPI, a sum then one scaling); floating-point
// tensors only.
enum class ReduceOp { sum, max, avg };

// A collective or a point-to-point message in flight; wait() completes it, and throws mt::Error if it
// failed (e.g. a received message of the wrong size). The buffers must stay alive and untouched until
// then. Destroying a request that was never waited for completes it first (its errors are lost), except
// an unmatched receive from self, which is cancelled (waiting for it could only hang).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  // Lets the operation advance without waiting for it (MPI moves non-blocking collectives along
  // only inside MPI calls, so a caller with other work polls between its pieces).
  virtual void progress() {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Reductions take f32, f64 or i32 tensors; gather, scatter and broadcast take any dtype.
  // t = op over ranks of t (in place).
  virtual void all_reduce(const TensorView& t, ReduceOp op) = 0;
  // out = concat over ranks of in (rank order, along the flat element order): out.numel() ==
  // size() · in.numel(). in either lies outside out or is exactly out's rank()-th part (in place,
  // MPI_IN_PLACE: no staging copy).
  virtual void all_gather(const TensorView& out, const TensorView& in) = 0;
  // out = rank()'s slice of (op over ranks of in): in.numel() == size() · out.numel().
  virtual void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) = 0;
  virtual void broadcast(const TensorView& t, int root) = 0;
  virtual void barrier() = 0;
  // Personalised exchange with per-rank counts (MPI_Alltoallv; the MoE alltoall dispatcher): rank r
  // gets the send_counts[r] elements of `in` that follow those of ranks < r (chunks contiguous in rank
  // order), and `out` holds what each rank sent here, recv_counts[q] elements from rank q, in rank
  // order. Counts are elements of the tensors' dtype (any dtype: bytes move); both lists have size()
  // entries, in.numel() == Σ send_counts, out.numel() == Σ recv_counts, and in and out do not overlap.
  // A pair's counts must agree (recv_counts[q] here == send_counts[rank()] on q): exchange them first.
  // MPI reports a chunk larger than its receive count as an error but may not notice a smaller one.
  virtual void all_to_all_v(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                            std::span<const int64_t> send_counts) = 0;

  virtual std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) = 0;
  virtual std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) = 0;
  virtual std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                            ReduceOp op) = 0;

  // Point-to-point messages (the pipeline's send_forward / recv_forward / send_backward / ... build on
  // these; only the two ranks of a message take part). Bytes move, so any dtype works; the receiving
  // tensor must have exactly the byte size of the message (else an mt::Error naming both sizes).
  // Matching: a receive from `src` with `tag` takes the oldest unmatched message `src` sent to this rank
  // with that tag, so messages of one pair and one tag arrive in send order, while messages with
  // different tags are independent: several can be in flight between one pair and be received in any
  // order. Tags lie in [0, max_tag()].
  // Blocking: recv returns once the bytes have arrived. send returns once `t` may be reused, which may
  // be only after the peer posted the matching receive (no buffering is promised), so two ranks that
  // exchange must not both send first: post recv_async, then send_async, then wait both (1F1B's order),
  // or let one side of each pair receive first.
  // Self (peer == rank()) is a loopback and never blocks: send copies the bytes into a queue; a receive
  // takes the oldest queued message with its tag; a recv_async with none queued is filled by the next
  // matching send, and a blocking recv (or a wait()) that finds none is an mt::Error, never a hang.
  virtual int max_tag() const = 0;
  virtual void send(const TensorView& t, int dst, int tag) = 0;
  virtual void recv(const TensorView& t, int src, int tag) = 0;
  virtual std::unique_ptr<CommRequest> send_async(const TensorView& t, int dst, int tag) = 0;
  virtual std::unique_ptr<CommRequest> recv_async(const TensorView& t, int src, int tag) = 0;

  // Collective over this communicator: ranks that pass the same color form a new communicator,
  // ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every process of the job with `code` (used on errors so no rank waits forever).
  [[noreturn]] virtual void abort(int code) = 0;
};

// The size-1 communicator: collectives are copies, messages are the loopback, abort exits the process.
// Its max_tag() is 32767, the least MPI_TAG_UB the MPI standard allows, so a tag scheme that works on
// one rank works under any MPI.
std::unique_ptr<Communicator> make_self_communicator();

// Shape/dtype rules shared by the implementations; throw mt::Error naming the collective.
void check_reduce_args(const TensorView& t, const char* op, ReduceOp reduce = ReduceOp::sum);
// t /= divisor (f32 or f64): the second half of ReduceOp::avg where the transport only sums.
void divide_in_place(const TensorView& t, int divisor);
// in_place_rank >= 0: part may be exactly whole's in_place_rank-th part (all_gather in place).
// host_only: the tensors must be host-addressable (false: the caller checked their device itself).
void check_gather_args(const TensorView& whole, const TensorView& part, int size, const char* op,
                       int in_place_rank = -1, bool host_only = true);
// all_to_all_v's rules: (host) tensors of one dtype that do not overlap, `size` non-negative counts
// per side summing to the tensors' element counts.
void check_all_to_all_args(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                           std::span<const int64_t> send_counts, int size, const char* op, bool host_only = true);
// part is exactly whole's rank-th part (same memory).
bool is_part(const TensorView& whole, const TensorView& part, int rank);
// Point-to-point rules: host tensor, peer in [0, size), tag in [0, max_tag]; the message names op, peer,
// tag and tensor.
void check_p2p_args(const TensorView& t, int peer, int tag, int size, int max_tag, const char* op);
// A received message must fill the receive buffer exactly.
void check_message_bytes(size_t message_bytes, const TensorView& t, int src, int tag, const char* op);

}  // namespace mt
