#include "model/recompute.h"

#include <algorithm>

namespace mt {

RecomputePlan::RecomputePlan(const ModelConfig& c, StageRange range)
    : full_(c.recompute_granularity == RecomputeGranularity::full),
      method_(c.recompute_method),
      group_(c.recompute_num_layers),
      range_(range) {}

int64_t RecomputePlan::group_first(int64_t layer) const {
  if (!full_) return -1;
  const int64_t local = layer - range_.first_layer;
  if (method_ == RecomputeMethod::block) return local < group_ ? layer : -1;
  return range_.first_layer + local / group_ * group_;
}

int64_t RecomputePlan::group_size(int64_t first) const {
  if (method_ == RecomputeMethod::block) return 1;
  return std::min(group_, range_.last_layer - first);
}

bool RecomputePlan::group_last(int64_t layer) const {
  const int64_t first = group_first(layer);
  return first >= 0 && layer == first + group_size(first) - 1;
}

int64_t RecomputePlan::largest_group() const {
  if (!full_ || range_.num_layers() == 0) return 0;
  return group_size(range_.first_layer);
}

std::vector<MlpKinds> RecomputePlan::pool_kinds(const ModelConfig& c) const {
  std::vector<MlpKinds> kinds(static_cast<size_t>(largest_group()));
  for (int64_t i = range_.first_layer; i < range_.last_layer; ++i)
    if (group_first(i) >= 0) {
      MlpKinds& k = kinds[static_cast<size_t>(i - group_first(i))];
      k = k | c.mlp_kinds(i, i + 1);
    }
  return kinds;
}

}  // namespace mt
