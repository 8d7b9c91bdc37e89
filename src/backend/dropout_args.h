// Owns DropoutRows, the argument of the dropout kernels that says which Philox element each element
// of a tensor draws; shared by ops/dropout.h and every backend's kernels (backends sit below ops).
#pragma once

#include <cstdint>
#include <limits>

#include "backend/seq_rows.h"
#include "base/hd.h"

namespace mt {

// A tensor viewed as [rows, width] (width = its last dimension) whose rows are Megatron's [s, b]
// token order: row r holds position p = positions.position(first_position + r / batch) of sample
// first_sample + r % batch (`positions` maps a context-parallel shard's rows to the sequence; the
// identity otherwise). Element c of row r draws Philox element
//   offset + ((first_sample + r % batch) · seq_length + p) · width + c,
// which depends on the global sample, the position and the element only: not on how samples are
// grouped into micro-batches, nor on which rank holds the rows (sequence and context parallelism).
// With the defaults (batch = seq_length = 1) element i of the tensor draws offset + i: the flat form.
struct DropoutRows {
  uint64_t offset = 0;
  uint64_t first_sample = 0;   // global index of the sample in batch position 0
  int64_t batch = 1;           // b
  int64_t seq_length = 1;      // positions per sample (the whole sequence, not a shard of it)
  int64_t first_position = 0;  // position of row 0 (a sequence-parallel shard starts later)
  SeqRows positions;           // a context-parallel shard's positions in the sequence

  DropoutRows(uint64_t flat_offset = 0) : offset(flat_offset) {}  // NOLINT: an offset is the flat form
  DropoutRows(uint64_t first_sample_, int64_t batch_, int64_t seq_length_, int64_t first_position_,
              SeqRows positions_ = {})
      : first_sample(first_sample_),
        batch(batch_),
        seq_length(seq_length_),
        first_position(first_position_),
        positions(positions_) {}

  // Philox element of element 0 of row r; the row's elements draw consecutive ones.
  MT_HD uint64_t row_start(int64_t r, int64_t width) const {
    const uint64_t sample = first_sample + static_cast<uint64_t>(r % batch);
    const uint64_t position = static_cast<uint64_t>(positions.position(first_position + r / batch));
    return offset + (sample * static_cast<uint64_t>(seq_length) + position) * static_cast<uint64_t>(width);
  }
  // Whether consecutive rows draw consecutive ranges, so the tensor is one flat range from row_start(0).
  bool flat() const { return batch == 1 && positions.split == std::numeric_limits<int64_t>::max(); }
};

}  // namespace mt
