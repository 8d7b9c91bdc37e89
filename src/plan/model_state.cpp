#include "plan/model_state.h"

#include <algorithm>

#include "model/params.h"

namespace mt {

ModelStateBytes model_state_bytes(const ModelConfig& c, const StageRange& range, const DdpConfig& ddp,
                                  const MuonGeometry* muon) {
  // The dense parameters' buffer over dp, and (MoE) the experts' over expert-dp.
  const std::vector<ParamSpec> specs = param_specs(c, range);
  ModelStateBytes b;
  for (const ParamSet set : {ParamSet::dense, ParamSet::experts}) {
    const DdpConfig group = set == ParamSet::dense ? ddp : expert_ddp(c, ddp);
    const std::vector<ParamSpec> subset = param_subset(specs, set);
    if (subset.empty()) continue;
    const DdpBufferLayout layout = param_buffer_layout(subset, group, shard_sizes(c));
    b.weights += layout.numel * static_cast<int64_t>(dtype_size(c.params_dtype));
    b.grads += layout.numel * 4;
    // AdamW keeps its state for this rank's shard of every bucket (the distributed optimizer over
    // more than one rank of its instance: dp/N ranks with N instances) or for the whole buffer.
    // The reduce-scatter's scratch holds the shards whenever dp reduces under the distributed
    // optimizer (a whole bucket each when an instance has one rank).
    const int shard = group.shard_size();
    int64_t state = 0;  // up to the last parameter's end (no trailing padding) when not sharded
    for (const BufferRange& p : layout.params) state = std::max(state, p.end);
    if (group.use_distributed_optimizer && group.data_parallel_size > 1) {
      const int64_t shards = layout.numel / shard;  // every bucket divides by the shard size
      if (shard > 1) state = shards;
      b.reduce_scatter += shards * 4;
    }
    // m (and the f32 main parameters) for every element; v for Adam's (optim/optimizer.cpp).
    const int64_t tensors = c.params_dtype == DType::f32 ? 1 : 2;
    std::vector<bool> adam;
    for (const ParamSpec& p : subset) adam.push_back(!muon || !is_muon_matrix(p.name, p.shape, p.expert));
    const bool sharded = group.use_distributed_optimizer && group.data_parallel_size > 1 && shard > 1;
    b.optimizer += (tensors * state + selected_state_elements(layout, adam, sharded ? shard : 1)) * 4;
    if (!muon) continue;
    const ShardRanks ranks = shard_sizes(c);
    for (const ParamSpec& p : subset) {
      if (!is_muon_matrix(p.name, p.shape, p.expert)) continue;
      const ShardRanks::Split split = ranks.of(p);
      const Shape local = split.local(p.shape);
      b.muon.add(local.numel(), muon_matrices(p.name, local, split.shard, split.size, p.expert, *muon));
    }
    if (sharded)
      for (const DdpBucket& bucket : layout.buckets) b.muon_bucket = std::max(b.muon_bucket, bucket.range.numel());
  }
  // --moe-router-enable-expert-bias: an f32 [E] state per MoE layer, counted as weights.
  if (c.moe.expert_bias)
    for (int64_t i = range.first_layer; i < range.last_layer; ++i)
      if (c.mlp_kind(i) == MlpKind::moe) b.weights += 4 * c.moe.num_experts;
  return b;
}

int64_t muon_scratch_bytes(const std::vector<ModelStateBytes>& chunks) {
  MuonScratch most;
  int64_t bucket = 0;
  for (const ModelStateBytes& c : chunks) {
    most.add(c.muon);
    bucket = std::max(bucket, c.muon_bucket);
  }
  return 4 * (most.elements() + bucket);
}

}  // namespace mt
