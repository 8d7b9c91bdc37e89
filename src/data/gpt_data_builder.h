// Owns BlendedMegatronDatasetBuilder for GPT data read from .bin/.idx files: --data-path (one
// prefix, several, or weighted) split by --split, or per-split --train/--valid/--test-data-path,
// into one GptSampleDataset per split (a GptDataset, or a BlendedDataset of several), with the
// GptDataset indices cached under the cache directory and built only once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"

namespace mt {

struct GptDataConfig {
  std::optional<Blend> blend;                           // --data-path
  std::array<std::optional<Blend>, 3> blend_per_split;  // --train/valid/test-data-path
  std::string split = "969, 30, 1";                     // --split (used with --data-path)
  GptDatasetConfig gpt;
  // --data-cache-path; unset: PREFIX/cache/GPTDataset_indices per dataset, as Megatron.
  std::optional<std::string> cache_path;
  bool use_cache = true;
  double mid_level_dataset_surplus = 0.005;  // --mid-level-dataset-surplus
};

struct GptDataBuildStats {
  int64_t indices_built = 0;   // GptDataset indices computed
  int64_t indices_loaded = 0;  // GptDataset indices read from the cache
};

// The train/valid/test datasets for `sizes` samples each (Megatron's train_valid_test_num_samples).
// A split of size 0, or one the config does not name, is null.
std::array<std::shared_ptr<const GptSampleDataset>, 3> build_gpt_datasets(const GptDataConfig& config,
                                                                          const std::array<int64_t, 3>& sizes,
                                                                          GptDataBuildStats* stats = nullptr);

}  // namespace mt
