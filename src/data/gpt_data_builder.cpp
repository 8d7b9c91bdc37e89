// Owns the GPT dataset builder over .bin/.idx files (see gpt_data_builder.h); mirrors
// blended_megatron_dataset_builder.py::_build_blended_dataset_splits.
#include "data/gpt_data_builder.h"

#include <filesystem>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data/index_cache.h"
#include "data/indexed_dataset.h"

namespace mt {

namespace {

using Sizes = std::array<std::optional<int64_t>, 3>;
using Mids = std::array<std::shared_ptr<const GptDataset>, 3>;

class Builder {
 public:
  Builder(const GptDataConfig& config, GptDataBuildStats* stats) : config_(config), stats_(stats) {}

  // _build_megatron_dataset_splits: the splits `matrix` names of one prefix, `sizes` samples each.
  Mids build_prefix(const std::string& prefix, const SplitMatrix& matrix, const Sizes& sizes) {
    const std::shared_ptr<const IndexedDataset> low = open(prefix);
    Mids out;
    for (int s = 0; s < 3; ++s) {
      if (!matrix[s]) continue;
      const auto [begin, end] = split_sequence_range(*matrix[s], low->num_sequences());
      std::vector<int32_t> indices(static_cast<size_t>(std::max<int64_t>(0, end - begin)));
      std::iota(indices.begin(), indices.end(), static_cast<int32_t>(begin));
      out[s] = gpt_dataset(low, std::move(indices), sizes[s], static_cast<Split>(s));
    }
    return out;
  }

  // One blend over the splits `matrix` names; sizes[s] is the blend's requested size.
  std::array<std::shared_ptr<const GptSampleDataset>, 3> build_blend(const Blend& blend, const SplitMatrix& matrix,
                                                                     const Sizes& sizes) {
    std::array<std::shared_ptr<const GptSampleDataset>, 3> out;
    if (blend.prefixes.size() == 1 && !blend.weights) {
      const Mids mids = build_prefix(blend.prefixes[0], matrix, sizes);
      for (int s = 0; s < 3; ++s)
        if (mids[s]) out[s] = std::make_shared<SingleGptDataset>(mids[s]);
      return out;
    }
    std::optional<std::vector<double>> weights;
    if (blend.weights) weights = normalize_weights(*blend.weights);
    std::array<std::vector<int64_t>, 3> split_sizes;  // per dataset, for each requested split
    if (weights)
      for (int s = 0; s < 3; ++s)
        if (sizes[s]) split_sizes[s] = blend_dataset_sizes(*weights, *sizes[s], config_.mid_level_dataset_surplus);
    std::vector<Mids> mids;
    for (size_t d = 0; d < blend.prefixes.size(); ++d) {
      Sizes per_dataset;  // nullopt (one epoch) without weights
      for (int s = 0; s < 3; ++s)
        if (!split_sizes[s].empty()) per_dataset[s] = split_sizes[s][d];
      mids.push_back(build_prefix(blend.prefixes[d], matrix, per_dataset));
    }
    for (int s = 0; s < 3; ++s) {
      if (!matrix[s] || !sizes[s]) continue;
      std::vector<std::shared_ptr<const GptSampleDataset>> parts;
      for (const Mids& m : mids) parts.push_back(std::make_shared<SingleGptDataset>(m[s]));
      std::vector<double> w;
      int64_t size = 0;
      if (weights) {
        w = *weights;
        for (int64_t n : blend_dataset_sizes(*weights, *sizes[s], 0.0)) size += n;
      } else {
        // Without weights each dataset counts by its length, and the blend is capped by their sum.
        for (const auto& p : parts) {
          MT_CHECK(p->size() > 0) << "dataset " << blend.prefixes[&p - parts.data()] << " has no "
                                  << split_name(static_cast<Split>(s)) << " samples to blend";
          w.push_back(static_cast<double>(p->size()));
          size += p->size();
        }
        size = std::min(size, *sizes[s]);
      }
      out[s] = std::make_shared<BlendedDataset>(std::move(parts), std::move(w), size, static_cast<Split>(s));
    }
    return out;
  }

 private:
  std::shared_ptr<const IndexedDataset> open(const std::string& prefix) {
    auto it = open_.find(prefix);
    if (it == open_.end()) it = open_.emplace(prefix, std::make_shared<const IndexedDataset>(prefix)).first;
    return it->second;
  }

  std::shared_ptr<const GptDataset> gpt_dataset(const std::shared_ptr<const IndexedDataset>& low,
                                                std::vector<int32_t> indices, std::optional<int64_t> num_samples,
                                                Split split) {
    const GptDatasetConfig& c = config_.gpt;
    if (!config_.use_cache) {
      if (stats_) ++stats_->indices_built;
      return std::make_shared<const GptDataset>(low, std::move(indices), num_samples, split, c);
    }
    // Everything the indices depend on; a change of any of them is a different cache file.
    nlohmann::ordered_json d;
    d["class"] = "GPTDataset";
    d["format"] = 1;
    d["dataset_path"] = low->prefix();
    d["dataset_sequences"] = low->num_sequences();
    d["dataset_tokens"] = low->num_tokens();
    // A dataset preprocessed again under the same name gets new indices.
    std::error_code ec;
    const auto modified = std::filesystem::last_write_time(idx_path_of(low->prefix()), ec);
    d["index_file_modified"] = ec ? 0 : static_cast<int64_t>(modified.time_since_epoch().count());
    d["indices"] = indices.empty() ? nlohmann::ordered_json::array()
                                   : nlohmann::ordered_json::array({indices.front(), indices.back() + 1});
    d["num_samples"] = num_samples ? nlohmann::ordered_json(*num_samples) : nlohmann::ordered_json();
    d["index_split"] = split_name(split);
    d["random_seed"] = c.random_seed;
    d["sequence_length"] = c.sequence_length;
    d["add_extra_token_to_sequence"] = c.add_extra_token;
    d["drop_last_partial_validation_sequence"] = split == Split::valid ? c.drop_last_partial_validation_sequence : true;
    const std::string description = d.dump(4);
    const std::string dir =
        config_.cache_path ? *config_.cache_path : low->prefix() + "/cache/GPTDataset_indices";
    const std::string path = gpt_index_cache_path(dir, description, split);
    if (std::optional<GptDatasetIndices> cached = load_gpt_indices(path, description)) {
      if (stats_) ++stats_->indices_loaded;
      return std::make_shared<const GptDataset>(low, std::move(indices), num_samples, split, c, std::move(*cached));
    }
    GptDatasetIndices built = GptDataset::build_indices(*low, indices, num_samples, split, c);
    save_gpt_indices(path, description, built);
    if (stats_) ++stats_->indices_built;
    return std::make_shared<const GptDataset>(low, std::move(indices), num_samples, split, c, std::move(built));
  }

  const GptDataConfig& config_;
  GptDataBuildStats* stats_;
  std::map<std::string, std::shared_ptr<const IndexedDataset>> open_;
};

}  // namespace

std::array<std::shared_ptr<const GptSampleDataset>, 3> build_gpt_datasets(const GptDataConfig& config,
                                                                          const std::array<int64_t, 3>& sizes,
                                                                          GptDataBuildStats* stats) {
  bool per_split = false;
  for (const auto& b : config.blend_per_split) per_split = per_split || b.has_value();
  MT_CHECK(config.blend.has_value() != per_split)
      << (per_split ? "--data-path excludes --train-data-path/--valid-data-path/--test-data-path; give one or the other"
                    : "no training data: pass --data-path (or --train-data-path ...), or --mock-data");
  Builder builder(config, stats);
  std::array<std::shared_ptr<const GptSampleDataset>, 3> out;
  if (config.blend) {
    SplitMatrix matrix = split_matrix_from_vector(parse_and_normalize_split(config.split));
    Sizes wanted;
    for (int s = 0; s < 3; ++s) {
      if (sizes[s] > 0) wanted[s] = sizes[s];
      else matrix[s].reset();  // a split the run never reads is not built
    }
    return builder.build_blend(*config.blend, matrix, wanted);
  }
  for (int s = 0; s < 3; ++s) {
    if (!config.blend_per_split[s] || sizes[s] <= 0) continue;
    SplitMatrix matrix;
    matrix[s] = std::make_pair(0.0, 1.0);  // each split's own data is used whole
    Sizes wanted;
    wanted[s] = sizes[s];
    Blend blend = *config.blend_per_split[s];
    if (blend.prefixes.size() == 1) blend.weights.reset();  // one prefix is never blended
    out[s] = builder.build_blend(blend, matrix, wanted)[s];
  }
  return out;
}

}  // namespace mt
