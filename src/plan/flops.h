// Megatron's FLOPs-per-iteration formula (training.py::num_floating_point_operations, GPT without
// MTP): factor 6 = 3 passes (fwd, dgrad, wgrad) × 2 flops per multiply-add, causal attention
// scores counted at half; an MoE layer's MLP counts its top-k routed experts and its shared
// expert (the router's GEMM is not counted, as in Megatron).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace mt {

// FLOPs of one iteration over `global_batch` sequences of config.seq_length tokens.
double flops_per_iteration(const ModelConfig& config, int64_t global_batch);

// What recomputation adds to that in the layers of `range`, for `sequences` sequences through
// them: the attention scores (QKᵀ, causal half) that the flash path's backward remakes (the
// path selective recomputation of core_attn means here), fc1 under --recompute-modules mlp, and
// under full recomputation each recomputed layer's forward again, less fc2 for the last layer of
// a group (its output is kept) unless that layer is MoE (its rerun needs the experts' output).
double recompute_flops(const ModelConfig& config, const StageRange& range, int64_t sequences);

}  // namespace mt
