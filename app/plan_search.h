// `megatron plan --search` (see plan/layout_search.h).
#pragma once

#include "app/options.h"
#include "model/config.h"
#include "train/train_config.h"

namespace mt {

// Plans every layout of `world_size` ranks for `model` and `train`'s global batch (their own
// layout flags are replaced), and prints those whose every rank fits the budget, fastest first.
int plan_search(const Options& options, const ModelConfig& model, const TrainConfig& train, int world_size);

}  // namespace mt
