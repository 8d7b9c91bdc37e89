// Owns the memory of a stage's model state from the configuration alone: its weights (in the
// parameter dtype), its main gradients (f32) and its AdamW state (f32 m and v, plus f32 main
// parameters for a 16-bit model), laid out as the stage lays them out: Megatron's DDP buffer
// (model/param_layout: padding and buckets included) and, under the distributed optimizer, this
// data-parallel rank's shard of each bucket. Bytes as the memory tracker counts them.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/param_layout.h"

namespace mt {

struct ModelStateBytes {
  int64_t weights = 0, grads = 0, optimizer = 0;
  // The distributed optimizer's reduce-scatter output: this rank's shard of every bucket (f32),
  // a communication buffer.
  int64_t reduce_scatter = 0;
  int64_t total() const { return weights + grads + optimizer; }
};

// c: the whole model, finalized (its tensor-parallel size splits the parameters); range: the
// stage; ddp: its data-parallel settings (the distributed optimizer shards over ddp's size).
ModelStateBytes model_state_bytes(const ModelConfig& c, const StageRange& range, const DdpConfig& ddp);

}  // namespace mt
