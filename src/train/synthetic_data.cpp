#include "train/synthetic_data.h"

#include "base/error.h"
#include "base/rng.h"

namespace mt {

SyntheticTokens::SyntheticTokens(int64_t vocab_size, int64_t seq_length, uint64_t seed)
    : vocab_(vocab_size), seq_(seq_length), seed_(seed) {
  MT_CHECK(vocab_size >= 2) << "synthetic data needs a vocabulary of at least 2 tokens";
}

void SyntheticTokens::batch(int64_t first, int64_t count, std::vector<int32_t>& tokens,
                            std::vector<int32_t>& labels) const {
  tokens.resize(static_cast<size_t>(count * seq_));
  labels.resize(tokens.size());
  const RngStream rng{seed_, stream_id("synthetic_tokens")};
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t sample = static_cast<uint64_t>(first + j);
    const auto start = static_cast<int64_t>(rng.uniform(2 * sample) * static_cast<float>(vocab_));
    const auto stride = 1 + static_cast<int64_t>(rng.uniform(2 * sample + 1) * 8.0f);
    for (int64_t i = 0; i <= seq_; ++i) {
      const auto token = static_cast<int32_t>((start + i * stride) % vocab_);
      if (i < seq_) tokens[j * seq_ + i] = token;
      if (i > 0) labels[j * seq_ + i - 1] = token;
    }
  }
}

}  // namespace mt
