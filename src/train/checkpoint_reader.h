// Owns opening a saved checkpoint for reading: the manifest of the latest (or a chosen) iteration,
// its shard files mapped and checked against the manifest, the check that it holds the expected
// model, and any rank's piece of any tensor under any layout (through train/checkpoint_tensors.h).
// The trainer's resume, `megatron convert` and inference all read checkpoints through it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/params.h"
#include "train/checkpoint_manifest.h"
#include "train/checkpoint_tensors.h"

namespace mt {

class CheckpointReader {
 public:
  // The checkpoint under `root` ("latest", or iteration `step`). mt::Error naming the file when
  // there is none, or its manifest or a shard file is damaged.
  CheckpointReader(const std::string& root, std::optional<int64_t> step);

  const std::string& dir() const { return dir_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  // mt::Error unless the checkpoint holds a model of c's architecture (checkpoint_args.h).
  void check_model(const ModelConfig& c) const;
  bool has(const std::string& kind, const std::string& name) { return tensors_.has(kind, name); }
  // Elements [begin, begin + dst.numel()) of this rank's shard of p's `kind` ("param",
  // "exp_avg", ...) into dst (p.shard over p.shard_size ranks, this one p.shard_rank).
  void read(const std::string& kind, const Param& p, int64_t begin, const TensorView& dst);
  // Every parameter's values (its shard, p.value).
  void read_weights(const std::vector<Param>& params);
  // Named f32 buffers that are not parameters, whole on every rank (the routers' expert biases):
  // each filled from the checkpoint's tensor of that name; a missing one is an error naming it.
  void read_buffers(const std::vector<std::pair<std::string, TensorView>>& buffers);
  // The whole tensor kind/name in f32 (see CheckpointTensors::whole; valid until the next call).
  const std::vector<float>& whole(const std::string& kind, const std::string& name, const Shape& expected,
                                  Shape& shape) {
    return tensors_.whole(kind, name, expected, shape);
  }

 private:
  std::string dir_;
  CheckpointManifest manifest_;
  CheckpointTensors tensors_;
  std::vector<uint64_t> staging_;  // a device piece's host copy (words: aligned for any dtype)
};

}  // namespace mt
