// Owns TensorParallel: what a layer needs to know about its tensor-parallel group (the
// communicator, this rank's place in it, and whether --sequence-parallel splits the residual
// stream). A default-constructed one means no tensor parallelism, so single-rank code has no
// special cases.
#pragma once

#include <cstdint>

#include "comm/communicator.h"

namespace mt {

struct TensorParallel {
  Communicator* comm = nullptr;   // the tp group; null: size 1
  bool sequence_parallel = false;  // --sequence-parallel (only meaningful with size > 1)

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  // The residual stream (norms, dropout, residual adds) is split along the sequence.
  bool sp() const { return sequence_parallel && active(); }
  // Rows of the residual stream this rank holds out of `rows` ([s, b] order, s split evenly).
  int64_t local_rows(int64_t rows) const { return sp() ? rows / size() : rows; }
  // Global index of this rank's first residual-stream row.
  int64_t first_row(int64_t rows) const { return sp() ? rank() * (rows / size()) : 0; }
};

}  // namespace mt
