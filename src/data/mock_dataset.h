// Owns Megatron's `--mock-data` source (gpt_dataset.py::MockGPTLowLevelDataset and the builder's
// mock branch): 100,000 sequences whose lengths are numpy.random.default_rng(0).integers(1, 4096,
// size=100000, dtype=int32) and whose sequence i is [1, 2, ..., L-1] mod vocab_size followed by
// EOD; with no data path the split is forced to "1,1,1". The GPT index machinery then runs as
// for real data, so a mock run sees the same samples as Megatron's mock run.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "data/gpt_dataset.h"

namespace mt {

// The token ids of Megatron's NullTokenizer (--tokenizer-type NullTokenizer --vocab-size V) as of
// Megatron-LM main since April 2026 (megatron/core/tokenizers/text/libraries/null_tokenizer.py):
// vocab_size = V, eod = V - 1 (or --null-tokenizer-eod-id), pad = -1. Releases before that
// (and the removed legacy megatron/training/tokenizer/tokenizer.py::_NullTokenizer) used
// eod = V and vocab_size = V + 1; null_tokenizer_ids_legacy gives those.
struct NullTokenizerIds {
  int64_t vocab_size = 0;  // what tokenizer.vocab_size reports (the mock's modulus)
  int64_t eod = 0;
  int64_t pad = -1;
};
NullTokenizerIds null_tokenizer_ids(int64_t vocab_size, std::optional<int64_t> eod_id = std::nullopt,
                                    int64_t pad_id = -1);
NullTokenizerIds null_tokenizer_ids_legacy(int64_t vocab_size);

class MockGptLowLevelDataset : public LowLevelDataset {
 public:
  static constexpr int64_t k_size = 100000;              // MockGPTLowLevelDataset.size
  static constexpr uint64_t k_seed = 0;                  // MockGPTLowLevelDataset.seed
  static constexpr int64_t k_max_sequence_length = 4096;  // exclusive upper bound of a length

  // `vocab_size` is tokenizer.vocab_size (the modulus of the content); `eod` is tokenizer.eod.
  MockGptLowLevelDataset(int64_t vocab_size, int64_t eod);

  std::span<const int32_t> sequence_lengths() const override { return lengths_; }
  void read_tokens(int64_t seq, int64_t offset, int64_t length, std::vector<int64_t>& out) const override;

 private:
  int64_t vocab_size_, eod_;
  std::vector<int32_t> lengths_;
};

// The three mock splits as Megatron builds them for --mock-data: split "1,1,1" (whatever
// --split says), sizes = requested samples per split. The config's eod/pad ids should come from
// the tokenizer (null_tokenizer_ids).
std::array<std::optional<GptDataset>, 3> build_mock_gpt_datasets(const NullTokenizerIds& tokenizer,
                                                                  const std::array<std::optional<int64_t>, 3>& sizes,
                                                                  GptDatasetConfig config);

}  // namespace mt
