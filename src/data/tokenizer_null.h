// Owns Megatron's NullTokenizer (--tokenizer-type NullTokenizer --vocab-size V): text is already
// token ids written as whitespace-separated integers. Ids as in null_tokenizer_ids (mock_dataset.h):
// vocab_size = V, eod = V - 1 unless --null-tokenizer-eod-id, no bos, pad = -1 (so pad() is nullopt).
#pragma once

#include <optional>

#include "data/tokenizer.h"

namespace mt {

class NullTokenizer : public Tokenizer {
 public:
  explicit NullTokenizer(int64_t vocab_size, std::optional<int64_t> eod_id = std::nullopt);

  // "3 1 4" -> {3, 1, 4}; any run of whitespace separates. A word that is not an integer in
  // [0, vocab_size) throws mt::Error naming it.
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  // {3, 1, 4} -> "3 1 4" (Megatron's ' '.join(str(x) for x in ids)).
  std::string decode(std::span<const int32_t> ids) const override;
  // The generated ids alone: the text is ids, not prose, so no separating space leads it.
  std::string decode_continuation(std::span<const int32_t>, std::span<const int32_t> generated) const override {
    return decode(generated);
  }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod() const override { return eod_; }

 private:
  int64_t vocab_size_, eod_;
};

}  // namespace mt
