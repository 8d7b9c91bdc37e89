// Owns `megatron convert` (Megatron's tools/checkpoint/convert.py): a megatron.cpp checkpoint to a
// Hugging Face model directory (config.json + model.safetensors) and back, and a checkpoint
// resharded offline into another (tensor, pipeline) layout. Every tensor passes through its whole
// f32 form, one at a time; the permutations are model/hf_format.h's. Unsupported architectures
// and options are refused before anything is written.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mt {

struct ConvertOptions {
  std::string loader;  // "megatron" | "hf"
  std::string saver;   // "megatron" | "hf"
  std::string load_dir, save_dir;
  std::optional<int64_t> ckpt_step;  // megatron loader: this iteration instead of the latest
  int target_tp = 1, target_pp = 1;  // megatron saver: the layout of the files written
};

struct ConvertSummary {
  std::string description;  // what was converted, for the log
  int64_t tensors = 0;      // tensors written
  int64_t parameters = 0;   // model parameters (elements), padding excluded
};

// Throws mt::Error for bad options, unreadable or unsupported inputs; writes nothing then.
ConvertSummary convert_checkpoint(const ConvertOptions& options);

}  // namespace mt
