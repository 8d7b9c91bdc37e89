// Owns the mapping of train's command line onto ModelConfig and TrainConfig, which `megatron
// train` runs and `megatron plan` reads without running.
#pragma once

#include "app/options.h"
#include "model/config.h"
#include "train/train_config.h"

namespace mt {

// The model flags (shape, norms, activation, dropout, dtype, recomputation, tensor parallelism).
// Throws mt::Error on contradicting flags.
ModelConfig model_config(const Options& o);
// The training flags (batch, schedule, pipeline, data parallelism, checkpoints, optimizer).
TrainConfig train_config(const Options& o);

}  // namespace mt
