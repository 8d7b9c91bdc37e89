// Owns a synthetic, learnable token source for smoke runs and tests: each sequence is an
// arithmetic progression modulo the vocabulary with a random start and a random stride in
// [1, 8], so a model can push the loss far below log(vocab). Sample i depends only on
// (seed, i), so any consumer at any layout sees the same data.
#pragma once

#include <cstdint>
#include <vector>

namespace mt {

class SyntheticTokens {
 public:
  SyntheticTokens(int64_t vocab_size, int64_t seq_length, uint64_t seed);
  // Fills tokens/labels [count, seq_length] (labels are tokens shifted by one) for samples
  // first .. first + count − 1.
  void batch(int64_t first, int64_t count, std::vector<int32_t>& tokens, std::vector<int32_t>& labels) const;

 private:
  int64_t vocab_, seq_;
  uint64_t seed_;
};

}  // namespace mt
