// Owns the --mock-data low-level dataset and the mock split builder (see mock_dataset.h).
#include "data/mock_dataset.h"

#include "base/error.h"
#include "data/numpy_random.h"

namespace mt {

NullTokenizerIds null_tokenizer_ids(int64_t vocab_size, std::optional<int64_t> eod_id, int64_t pad_id) {
  MT_CHECK(vocab_size > 0) << "NullTokenizer needs --vocab-size > 0, got " << vocab_size;
  return {vocab_size, eod_id ? *eod_id : vocab_size - 1, pad_id};
}

NullTokenizerIds null_tokenizer_ids_legacy(int64_t vocab_size) {
  MT_CHECK(vocab_size > 0) << "NullTokenizer needs --vocab-size > 0, got " << vocab_size;
  return {vocab_size + 1, vocab_size, -1};
}

MockGptLowLevelDataset::MockGptLowLevelDataset(int64_t vocab_size, int64_t eod) : vocab_size_(vocab_size), eod_(eod) {
  MT_CHECK(vocab_size > 0) << "mock data needs a positive vocabulary size, got " << vocab_size;
  NumpyGenerator rng(k_seed);
  const std::vector<int64_t> lengths = rng.integers(1, k_max_sequence_length, k_size);
  lengths_.assign(lengths.begin(), lengths.end());
}

void MockGptLowLevelDataset::read_tokens(int64_t seq, int64_t offset, int64_t length, std::vector<int64_t>& out) const {
  MT_CHECK(seq >= 0 && seq < k_size) << "mock sequence " << seq << " out of range";
  const int64_t len = lengths_[static_cast<size_t>(seq)];
  MT_CHECK(offset >= 0 && length >= 0 && offset + length <= len)
      << "mock sequence " << seq << ": tokens [" << offset << ", " << offset + length << ") outside its " << len;
  // Token t of a sequence of length L: (t + 1) mod vocab for t < L - 1, then EOD.
  for (int64_t t = offset; t < offset + length; ++t) out.push_back(t == len - 1 ? eod_ : (t + 1) % vocab_size_);
}

std::array<std::optional<GptDataset>, 3> build_mock_gpt_datasets(const NullTokenizerIds& tokenizer,
                                                                  const std::array<std::optional<int64_t>, 3>& sizes,
                                                                  GptDatasetConfig config) {
  config.eod_token = tokenizer.eod;
  config.pad_token = tokenizer.pad;
  auto dataset = std::make_shared<const MockGptLowLevelDataset>(tokenizer.vocab_size, tokenizer.eod);
  return build_gpt_dataset_splits(dataset, "1,1,1", sizes, config);
}

}  // namespace mt
