// Owns the Communicator interface (DESIGN invariant 5): the collectives the parallel layers, the
// optimizer, the pipeline and checkpoints use, on host tensors, in blocking and non-blocking form,
// plus split (sub-groups by role) and abort (every rank exits, nobody hangs). Implementations:
// the size-1 one here, MPI in mpi_communicator.h; a counting wrapper for tests.
#pragma once

#include <memory>

#include "tensor/tensor.h"

namespace mt {

enum class ReduceOp { sum, max };

// A collective in flight; wait() completes it. The buffers must stay alive until then.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
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
  // size() · in.numel(). in and out must not overlap.
  virtual void all_gather(const TensorView& out, const TensorView& in) = 0;
  // out = rank()'s slice of (op over ranks of in): in.numel() == size() · out.numel().
  virtual void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) = 0;
  virtual void broadcast(const TensorView& t, int root) = 0;
  virtual void barrier() = 0;

  virtual std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) = 0;
  virtual std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) = 0;
  virtual std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                            ReduceOp op) = 0;

  // Collective over this communicator: ranks that pass the same color form a new communicator,
  // ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every process of the job with `code` (used on errors so no rank waits forever).
  [[noreturn]] virtual void abort(int code) = 0;
};

// The size-1 communicator: collectives are copies, abort exits the process.
std::unique_ptr<Communicator> make_self_communicator();

// Shape/dtype rules shared by the implementations; throw mt::Error naming the collective.
void check_reduce_args(const TensorView& t, const char* op);
void check_gather_args(const TensorView& whole, const TensorView& part, int size, const char* op);

}  // namespace mt
