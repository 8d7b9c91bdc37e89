// Owns the resharding map of checkpoints: whole tensors assembled from the pieces any layout
// saved (every piece placed by the whole-tensor index of each of its elements, parallel/shard.h),
// and the piece a rank of another layout takes from them. The vocabulary rows of the embedding
// and output layer may differ (the padding depends on tp): rows the saved tensor lacks are zero,
// rows it has beyond the model's are dropped.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ckpt/shard_file.h"
#include "parallel/shard.h"

namespace mt {

class CheckpointTensors {
 public:
  explicit CheckpointTensors(std::vector<ShardFile> files);

  bool has(const std::string& kind, const std::string& name) const { return pieces_.count(kind + "/" + name) > 0; }
  // The whole tensor kind/name in f32 and its shape. The model's shape for it is `expected`; the
  // saved one must equal it, except (vocabulary: the embedding and output layer) in the number of
  // rows, which the padding decides. mt::Error when it is absent, its pieces describe anything
  // else (a damaged or foreign file), or they leave elements uncovered (a missing file).
  // The result lives in this object's scratch until the next call (one buffer for every tensor:
  // no fresh memory, and its page faults, per tensor).
  const std::vector<float>& whole(const std::string& kind, const std::string& name, const Shape& expected,
                                  Shape& shape);

 private:
  std::vector<ShardFile> files_;
  std::map<std::string, std::vector<const TensorRecord*>> pieces_;  // by key
  std::vector<float> whole_;
  std::vector<uint8_t> seen_;
};

// The record of `data`: elements [begin, begin + data.numel()) of tensor-parallel rank tp_rank's
// shard (of tp, under `spec`) of the tensor kind/name of shape `whole`.
TensorRecord tensor_piece(const std::string& name, const std::string& kind, const Shape& whole, const ShardSpec& spec,
                          int tp_rank, int tp, int64_t begin, const TensorView& data);

// Writes into `dst` elements [begin, begin + dst.numel()) of rank r's shard (of t, under `spec`)
// of a tensor of shape `full`, taken from the whole tensor `src` of shape `src_shape` (see the
// file comment for vocabulary rows; any other difference of shape is an mt::Error naming `what`).
void take_piece(const std::vector<float>& src, const Shape& src_shape, const Shape& full, const ShardSpec& spec, int t,
                int r, int64_t begin, const TensorView& dst, const std::string& what);

}  // namespace mt
