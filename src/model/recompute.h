// Owns RecomputePlan: which of a stage's layers full activation recomputation reruns, in which
// groups (Megatron's --recompute-method applied to each pipeline chunk's own layers: uniform
// splits them into groups of --recompute-num-layers, block recomputes the first that many).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace mt {

class RecomputePlan {
 public:
  RecomputePlan(const ModelConfig& c, StageRange range);

  // The first (global) layer of the group that global layer `layer` is recomputed with, or -1
  // when the layer keeps its activations. Groups are [first, first + group_size(first)).
  int64_t group_first(int64_t layer) const;
  int64_t group_size(int64_t first) const;
  // Whether `layer` is the last of its group (its output is kept: the next group's input).
  bool group_last(int64_t layer) const;
  // Layers in the largest group (0 without full recomputation).
  int64_t largest_group() const;
  // The MLP kinds of the k-th layers of all groups, for k < largest_group(): one pool entry of
  // saved activations serves them all.
  std::vector<MlpKinds> pool_kinds(const ModelConfig& c) const;

 private:
  bool full_ = false;
  RecomputeMethod method_ = RecomputeMethod::uniform;
  int64_t group_ = 1;  // --recompute-num-layers
  StageRange range_;
};

}  // namespace mt
