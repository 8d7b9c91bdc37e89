// Owns Megatron's GPTDataset sample construction (megatron/core/datasets/gpt_dataset.py and
// helpers.cpp::build_sample_idx) over an abstract low-level dataset: the train/valid/test split
// string, the per-split document index (epochs, separate final epoch), the sample index, the
// shuffle index, and get_sample(i) -> tokens / labels / loss_mask / position_ids. Given the same
// lengths, seed and sizes, every index equals Megatron's element for element, and sample i is a
// pure function of i (no state advances as samples are read), so any consumer at any layout sees
// the same sequence. The real .bin/.idx reader and the mock dataset plug in as LowLevelDataset.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "data/numpy_random.h"

namespace mt {

// What GPTDataset needs from the storage underneath (IndexedDataset in Megatron).
class LowLevelDataset {
 public:
  virtual ~LowLevelDataset() = default;
  // Token count of every sequence, as the int32 array the .idx file stores.
  virtual std::span<const int32_t> sequence_lengths() const = 0;
  // Appends tokens [offset, offset + length) of sequence `seq` to `out`; the range is in bounds.
  virtual void read_tokens(int64_t seq, int64_t offset, int64_t length, std::vector<int64_t>& out) const = 0;
  int64_t num_sequences() const { return static_cast<int64_t>(sequence_lengths().size()); }
};

enum class Split { train = 0, valid = 1, test = 2 };
const char* split_name(Split s);

// --- Split strings (blended_megatron_dataset_config.py) ---------------------------------------

// parse_and_normalize_split: the numbers matched by [.0-9]+, padded with zeros to three and
// divided by their sum. "969,30,1" -> {0.969, 0.030, 0.001}.
std::array<double, 3> parse_and_normalize_split(std::string_view split);

// convert_split_vector_to_split_matrix: cumulative bookends; an empty range is nullopt.
using SplitMatrix = std::array<std::optional<std::pair<double, double>>, 3>;
SplitMatrix split_matrix_from_vector(const std::array<double, 3>& vector);

// The contiguous sequence ids [begin, end) a bookend selects out of n sequences
// (round-half-even of lo*n and hi*n, as Python's round does).
std::pair<int64_t, int64_t> split_sequence_range(std::pair<double, double> bookend, int64_t n);

// --- GPT dataset ------------------------------------------------------------------------------

struct GptDatasetConfig {
  int64_t sequence_length = 0;  // --seq-length
  uint32_t random_seed = 1234;  // --seed
  // Each sample reads sequence_length + 1 tokens so inputs and shifted labels both have
  // sequence_length entries (Megatron's default add_extra_token_to_sequence=True).
  bool add_extra_token = true;
  bool reset_position_ids = false;    // --reset-position-ids
  bool reset_attention_mask = false;  // --reset-attention-mask
  bool eod_mask_loss = false;         // --eod-mask-loss
  // --no-drop-last-partial-validation-sequence clears it; applies to the valid split only.
  bool drop_last_partial_validation_sequence = true;
  int64_t eod_token = 0;   // tokenizer.eod
  int64_t pad_token = -1;  // tokenizer.pad, or Megatron's _PAD_TOKEN_ID (-1) when it has none
  // --allow-ambiguous-pad-tokens: keep a pad id equal to EOD (else it falls back to -1).
  bool allow_ambiguous_pad_tokens = false;
};

// One sample: all vectors are [sequence_length].
struct GptSample {
  std::vector<int64_t> tokens;        // text[:-1]; pad ids replaced by 0
  std::vector<int64_t> labels;        // text[1:]; pad ids replaced by 0
  std::vector<float> loss_mask;       // 1, or 0 where the label is pad or (eod_mask_loss) the token is EOD
  std::vector<int64_t> position_ids;  // 0.. ; restart after each EOD with reset_position_ids
  // The index of the first token of each token's document (0, or one past the last EOD before
  // it): with reset_attention_mask token t attends to [document_start[t], t] (Megatron's
  // attention_mask[b, 0, i+1:, :i+1] = 0 for each EOD at i).
  std::vector<int64_t> document_start;
};

// What GptDataset builds from the lengths, the seed and the sizes (and the index cache stores).
struct GptDatasetIndices {
  int64_t tokens_per_epoch = 0;
  int64_t num_epochs = 1;
  bool separate_final_epoch = false;
  std::vector<int32_t> document_index;
  std::vector<int64_t> sample_index;   // flattened rows (position in document index, offset)
  std::vector<int64_t> shuffle_index;
};

class GptDataset {
 public:
  // `indices`: the sequence ids of this split (Megatron's indexed_indices, contiguous in
  // practice). `num_samples`: samples requested (nullopt = one epoch). Builds all three indices.
  GptDataset(std::shared_ptr<const LowLevelDataset> dataset, std::vector<int32_t> indices,
             std::optional<int64_t> num_samples, Split split, GptDatasetConfig config);
  // The same dataset from indices built before (the index cache); they are checked against the
  // dataset so that a stale or damaged cache cannot index out of bounds.
  GptDataset(std::shared_ptr<const LowLevelDataset> dataset, std::vector<int32_t> indices,
             std::optional<int64_t> num_samples, Split split, GptDatasetConfig config, GptDatasetIndices built);
  // What the first constructor builds.
  static GptDatasetIndices build_indices(const LowLevelDataset& dataset, std::span<const int32_t> indices,
                                         std::optional<int64_t> num_samples, Split split, GptDatasetConfig config);
  // The config as the dataset uses it (pad == eod falls back to -1 unless allowed).
  static GptDatasetConfig normalized(GptDatasetConfig config);

  // len(GPTDataset): the number of samples built, which can exceed num_samples.
  int64_t size() const { return static_cast<int64_t>(shuffle_index_.size()); }

  // The sequence_length + add_extra_token tokens of sample i (after the shuffle), padded with
  // pad_token when short (only the last non-drop-last validation sample can be).
  std::vector<int64_t> sample_text(int64_t i) const;
  GptSample get_sample(int64_t i) const;

  int64_t num_epochs() const { return num_epochs_; }
  int64_t num_tokens_per_epoch() const { return tokens_per_epoch_; }
  bool separate_final_epoch() const { return separate_final_epoch_; }
  Split split() const { return split_; }
  const GptDatasetConfig& config() const { return config_; }

  // The indices, as Megatron stores them (sample index flattened: row r = [2r], [2r+1]).
  const std::vector<int32_t>& document_index() const { return document_index_; }
  const std::vector<int64_t>& sample_index() const { return sample_index_; }
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }

 private:
  std::shared_ptr<const LowLevelDataset> dataset_;
  std::vector<int32_t> indices_;
  std::optional<int64_t> num_samples_;
  Split split_;
  GptDatasetConfig config_;
  int64_t tokens_per_epoch_ = 0;
  int64_t num_epochs_ = 1;
  bool separate_final_epoch_ = false;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;
  std::vector<int64_t> shuffle_index_;
};

// The pieces of GptDataset's construction, exposed for tests and for the index cache.

// _get_num_epochs: smallest E >= 1 with E * tokens_per_epoch >= num_samples*seq_length + extra.
int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t sequence_length,
                       int64_t extra_token);

// _build_document_index: `documents` tiled num_epochs times and shuffled once, or, with
// separate_final_epoch, (num_epochs - 1) tiles shuffled then one more tile shuffled.
std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch);

// helpers.cpp::build_sample_idx: (num_samples + 1) rows of (position in document index, token
// offset), flattened.
std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int64_t sequence_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch, bool drop_last_partial_sequence,
                                        int64_t extra_token);

// _build_shuffle_index: shuffle(arange(num_samples)) ++ shuffle(arange(num_samples, total_size)).
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng);

// BlendedMegatronDatasetBuilder for one low-level dataset: the split string picks each split's
// contiguous sequence range; sizes[s] is the number of samples requested (nullopt = one epoch).
// A split with an empty bookend is nullopt.
std::array<std::optional<GptDataset>, 3> build_gpt_dataset_splits(std::shared_ptr<const LowLevelDataset> dataset,
                                                                   std::string_view split,
                                                                   const std::array<std::optional<int64_t>, 3>& sizes,
                                                                   const GptDatasetConfig& config);

}  // namespace mt
