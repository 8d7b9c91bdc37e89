// Owns ShardSpec: how a parameter is split over the tensor-parallel group, and the map from an
// element of a rank's shard to its index in the whole tensor. Initialisation draws each element
// by its whole-tensor index (DESIGN invariant 2), so every layout starts from the same weights;
// checkpoints will reshard with the same map.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt {

struct ShardSpec {
  int dim = -1;        // the split dimension (0: output rows, 1: input columns); -1: every rank holds it whole
  int64_t blocks = 1;  // the dimension is `blocks` equal parts, each split t ways (SwiGLU's fc1: gate, up)

  bool sharded() const { return dim >= 0; }
};

// The shard's shape on each of t ranks; mt::Error when the dimension does not divide.
Shape shard_shape(const Shape& full, const ShardSpec& spec, int t);
// Whole-tensor flat index of flat element `i` of rank r's shard.
int64_t shard_global_index(const Shape& full, const ShardSpec& spec, int t, int r, int64_t i);

}  // namespace mt
