#include "plan/model_state.h"

#include <algorithm>

#include "model/params.h"

namespace mt {

ModelStateBytes model_state_bytes(const ModelConfig& c, const StageRange& range, const DdpConfig& ddp) {
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
    const int64_t tensors = c.params_dtype == DType::f32 ? 2 : 3;  // m, v (and the f32 main parameters)
    b.optimizer += tensors * state * 4;
  }
  // --moe-router-enable-expert-bias: an f32 [E] state per MoE layer, counted as weights.
  if (c.moe.expert_bias)
    for (int64_t i = range.first_layer; i < range.last_layer; ++i)
      if (c.mlp_kind(i) == MlpKind::moe) b.weights += 4 * c.moe.num_experts;
  return b;
}

}  // namespace mt
