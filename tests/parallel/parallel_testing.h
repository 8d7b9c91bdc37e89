// Helpers of the parallel tier: the job's world communicator and the shard of a whole reference
// tensor that a rank holds.
#pragma once

#include "comm/communicator.h"
#include "parallel/shard.h"
#include "testing.h"

namespace mt::test {

// MPI_COMM_WORLD of the test job (tests/parallel/main.cpp).
Communicator& world();

// Rank r's shard of `full` (f32) under `spec` over t ranks.
inline HostTensor shard_of(HostTensor& full, const ShardSpec& spec, int t, int r) {
  HostTensor out(DType::f32, shard_shape(full.shape, spec, t));
  for (int64_t i = 0; i < out.numel(); ++i) out.f32()[i] = full.f32()[shard_global_index(full.shape, spec, t, r, i)];
  return out;
}

// Rows [r·n/t, (r+1)·n/t) of a [n, ...] tensor (this rank's sequence-parallel block).
inline HostTensor row_block(HostTensor& full, int t, int r) {
  return shard_of(full, ShardSpec{0, 1}, t, r);
}

inline void expect_close(HostTensor& actual, HostTensor& expected, double atol, double rtol, const char* what) {
  ASSERT_EQ(actual.numel(), expected.numel()) << what;
  const std::vector<double> e = to_double(expected);
  expect_close(actual.f32(), e.data(), actual.numel(), atol, rtol, what);
}

}  // namespace mt::test
