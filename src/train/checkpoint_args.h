// Owns the model architecture a checkpoint records (its manifest's "model") and
// --use-checkpoint-args: the architecture taken from the checkpoint instead of the command line.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "model/config.h"

namespace mt {

// The fields that make two models the same (a finalized config: derived sizes filled in): a
// checkpoint loads only into a model with the same signature.
nlohmann::json model_signature(const ModelConfig& c);
// What a checkpoint records of its model: the signature plus settings that change the function
// but not the tensors (norm epsilon, RoPE base, rotary percent and form), which
// --use-checkpoint-args also takes.
nlohmann::json model_record(const ModelConfig& c);
// c's architecture replaced by `record` (a model_record; the norm epsilon and RoPE base only where
// recorded, as checkpoints of version 1 may lack them; a record without the rotary percent and
// form gives Megatron's defaults, 1.0 and rotate-half, which every such checkpoint was trained
// with). mt::Error naming `where` when a field is missing.
void apply_model_record(const nlohmann::json& record, const std::string& where, ModelConfig& c);

// The checkpoint under `root` ("latest", or `step`), whose manifest is returned; its directory
// in `dir`. mt::Error when there is none.
nlohmann::json read_checkpoint_manifest(const std::string& root, std::optional<int64_t> step, std::string& dir);

// --use-checkpoint-args: c's architecture replaced by the one the checkpoint under `root` records.
void apply_checkpoint_args(const std::string& root, std::optional<int64_t> step, ModelConfig& c);

}  // namespace mt
