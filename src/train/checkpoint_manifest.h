// Owns the manifest of a megatron.cpp checkpoint (manifest.json; ckpt/checkpoint_dir.h adds the
// magic and version): the saved model, the layout it was saved under, the training state, and
// each shard file with its size and checksum. One struct both ways, so the trainer, the offline
// converter and their readers cannot disagree on a field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "ckpt/shard_file.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

namespace mt {

struct CheckpointLayout {
  int world_size = 1, tp = 1, pp = 1, vp = 1, dp = 1;
  bool distributed_optimizer = false;
};

struct CheckpointManifest {
  nlohmann::json model;  // checkpoint_args.h's model_record of the saved model
  DType params_dtype = DType::f32;
  CheckpointLayout layout;
  int64_t iteration = 0, consumed_train = 0, consumed_valid = 0;
  bool optimizer_saved = false;
  int64_t optimizer_steps = 0, scheduler_steps = 0;
  std::optional<LrScheduleConfig> schedule;  // the learning-rate schedule saved (absent in older checkpoints)
  LossScalerState scaler;
  std::optional<uint64_t> seed;  // absent under --no-save-rng
  nlohmann::json tokenizer;      // the tokenizer's settings (app/tokenizer_flags.h), or null
  std::vector<std::pair<std::string, FileDigest>> files;
};

// The name of world rank r's shard file.
std::string shard_file_name(int world_rank);

nlohmann::json manifest_json(const CheckpointManifest& m);
// Reads and validates (counts, loss scale, file names); mt::Error naming dir's manifest.json.
CheckpointManifest parse_manifest(const nlohmann::json& j, const std::string& dir);

}  // namespace mt
