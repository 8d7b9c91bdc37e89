// Owns the memory of a stage's model state from the configuration alone: its weights (in the
// parameter dtype), its main gradients (f32) and its AdamW state (f32 m and v, plus f32 main
// parameters for a 16-bit model), laid out as the stage lays them out: Megatron's DDP buffer
// (model/param_layout: padding and buckets included) and, under the distributed optimizer, this
// data-parallel rank's shard of each bucket. Bytes as the memory tracker counts them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/muon_matrices.h"
#include "model/param_layout.h"

namespace mt {

struct ModelStateBytes {
  int64_t weights = 0, grads = 0, optimizer = 0;
  // The distributed optimizer's reduce-scatter output: this rank's shard of every bucket (f32),
  // a communication buffer.
  int64_t reduce_scatter = 0;
  // --optimizer muon: the scratch its step needs for this stage's matrices, and the largest
  // bucket its momenta are gathered into under the distributed optimizer (elements). The
  // optimizer holds one of each for all its chunks: muon_scratch_bytes() of the chunks' maxima.
  MuonScratch muon;
  int64_t muon_bucket = 0;
  int64_t total() const { return weights + grads + optimizer; }
};

// c: the whole model, finalized (its tensor-parallel size splits the parameters); range: the
// stage; ddp: its data-parallel settings (the distributed optimizer shards over ddp's size);
// muon: Muon's geometry under --optimizer muon (null: Adam for every parameter). Muon's
// matrices keep one state (their momentum) where Adam keeps two.
ModelStateBytes model_state_bytes(const ModelConfig& c, const StageRange& range, const DdpConfig& ddp,
                                  const MuonGeometry* muon = nullptr);
// The bytes of the Muon scratch for the chunks whose states are `chunks` (one scratch for all).
int64_t muon_scratch_bytes(const std::vector<ModelStateBytes>& chunks);

}  // namespace mt
