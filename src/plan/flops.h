// Megatron's FLOPs-per-iteration formula (training.py::num_floating_point_operations, dense GPT
// without MoE/MTP): factor 6 = 3 passes (fwd, dgrad, wgrad) × 2 flops per multiply-add, causal
// attention scores counted at half.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace mt {

// FLOPs of one iteration over `global_batch` sequences of config.seq_length tokens.
double flops_per_iteration(const ModelConfig& config, int64_t global_batch);

}  // namespace mt
