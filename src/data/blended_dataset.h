// Owns Megatron's dataset blending (blended_dataset.py, helpers.cpp::build_blending_indices,
// the blend parts of blended_megatron_dataset_builder.py and utils.py): the --data-path word
// list (weights and prefixes), weight normalisation with numpy's summation order, the samples
// each dataset is asked for (ceil(ceil(size·w)·(1 + surplus))), and the greedy blending index:
// sample s comes from the dataset whose share falls furthest behind w_i·max(s, 1).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"

namespace mt {

// One split's samples as training reads them: a GptDataset, or a blend of several.
class GptSampleDataset {
 public:
  virtual ~GptSampleDataset() = default;
  virtual int64_t size() const = 0;
  virtual GptSample get_sample(int64_t i) const = 0;
  virtual int64_t sequence_length() const = 0;
};

class SingleGptDataset : public GptSampleDataset {
 public:
  explicit SingleGptDataset(std::shared_ptr<const GptDataset> dataset) : dataset_(std::move(dataset)) {}
  int64_t size() const override { return dataset_->size(); }
  GptSample get_sample(int64_t i) const override { return dataset_->get_sample(i); }
  int64_t sequence_length() const override { return dataset_->config().sequence_length; }
  const GptDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const GptDataset> dataset_;
};

// A blend as given on the command line: prefixes, with weights or without.
struct Blend {
  std::vector<std::string> prefixes;
  std::optional<std::vector<double>> weights;
};

// get_blend_from_list: an even count of words whose odd positions are numbers is weight/prefix
// pairs; otherwise every word is a prefix. A list that mixes the two (a number where a prefix is
// expected, a word where a weight is expected, an unpaired weight) is an mt::Error naming
// `flag`, as are negative weights and weights summing to zero.
Blend parse_blend(const std::vector<std::string>& words, const std::string& flag);

// numpy.sum of a float64 array (pairwise summation in blocks of 8, as numpy does it), so the
// normalised weights match Megatron's to the last bit.
double numpy_sum(std::span<const double> values);
// utils.normalize: w / numpy.sum(w).
std::vector<double> normalize_weights(std::span<const double> weights);

// _get_size_per_split_per_dataset for one split: int(ceil(ceil(target·w)·(1 + surplus))).
std::vector<int64_t> blend_dataset_sizes(std::span<const double> normalized_weights, int64_t target, double surplus);

// helpers.cpp::build_blending_indices.
void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index);

class BlendedDataset : public GptSampleDataset {
 public:
  // `weights` as BlendedDataset receives them (normalised again here, as Megatron does when a
  // size is given). Throws when the blend asks a dataset for more samples than it has (raise the
  // surplus) or the datasets disagree on the sequence length.
  BlendedDataset(std::vector<std::shared_ptr<const GptSampleDataset>> datasets, std::vector<double> weights,
                 int64_t size, Split split);

  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  GptSample get_sample(int64_t i) const override;
  int64_t sequence_length() const override { return datasets_.front()->sequence_length(); }

  const std::vector<double>& weights() const { return weights_; }
  const std::vector<int16_t>& dataset_index() const { return dataset_index_; }
  const std::vector<int64_t>& dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::shared_ptr<const GptSampleDataset>> datasets_;
  std::vector<double> weights_;
  Split split_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

}  // namespace mt
