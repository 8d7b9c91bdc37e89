// Owns the MoE figures of one training iteration, as the log prints them: each auxiliary loss
// divided by its coefficient and averaged as Megatron's track_moe_metrics averages it (over the
// micro-batches, summed over the tensor-parallel shards, averaged over data-parallel ranks and
// over the MoE layers), the spread of tokens per expert, and the share of routing choices the
// capacity dropped.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "model/stage.h"
#include "train/metrics.h"  // MoeIterationMetrics

namespace mt {

// The stages' figures since their last reset_moe_stats(), reduced over the tp, cp, dp and pp groups
// (null: size 1); every rank of those groups must call it. Empty losses for a dense model.
MoeIterationMetrics reduce_moe_metrics(const ModelConfig& c, const std::vector<const Stage*>& stages,
                                       int64_t micro_batches, Communicator* tp, Communicator* cp, Communicator* dp,
                                       Communicator* pp);

// " MoE: tokens per expert min 120 mean 128.0 max 140 (max/mean 1.09) | dropped 0.00% of routed choices |"
std::string format_moe_line(const MoeIterationMetrics& m);

}  // namespace mt
