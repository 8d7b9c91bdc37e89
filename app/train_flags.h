// Owns the mapping of train's command line onto ModelConfig and TrainConfig, which `megatron
// train` runs and `megatron plan` reads without running.
#pragma once

#include <string>
#include <vector>

#include "app/options.h"
#include "model/config.h"
#include "train/train_config.h"

namespace mt {

// The model flags (shape, norms, activation, dropout, dtype, recomputation, tensor parallelism).
// Throws mt::Error on contradicting flags.
ModelConfig model_config(const Options& o);
// The training flags (batch, schedule, pipeline, data parallelism, checkpoints, optimizer).
// `for_plan`: plan reads the layout and memory only, so the learning rate may be absent.
TrainConfig train_config(const Options& o, bool for_plan = false);
// Flags given that change nothing in the combination given, as in Megatron (or, for kernel choices,
// run the same computation another way): one line each, for the log's first lines. `c` is
// model_config(o).
std::vector<std::string> inert_flag_notes(const Options& o, const ModelConfig& c);

}  // namespace mt
