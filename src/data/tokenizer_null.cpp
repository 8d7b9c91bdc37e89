// Owns NullTokenizer's parsing and printing of ids (see tokenizer_null.h).
#include "data/tokenizer_null.h"

#include <charconv>

#include "base/error.h"
#include "data/mock_dataset.h"

namespace mt {

NullTokenizer::NullTokenizer(int64_t vocab_size, std::optional<int64_t> eod_id) {
  MT_CHECK(vocab_size <= (int64_t{1} << 31)) << "NullTokenizer --vocab-size " << vocab_size
                                             << " does not fit 32-bit token ids";
  const NullTokenizerIds ids = null_tokenizer_ids(vocab_size, eod_id);
  vocab_size_ = ids.vocab_size;
  eod_ = ids.eod;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void NullTokenizer::encode_into(std::string_view text, std::vector<int32_t>& ids) const {
  size_t i = 0;
  while (i < text.size()) {
    if (is_space(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    const std::string_view word = text.substr(i, j - i);
    int64_t value = -1;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    MT_CHECK(ec == std::errc() && end == word.data() + word.size() && value >= 0 && value < vocab_size_)
        << "NullTokenizer: '" << word << "' is not a token id in [0, " << vocab_size_
        << "); its input is whitespace-separated integers";
    ids.push_back(static_cast<int32_t>(value));
    i = j;
  }
}

std::string NullTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text += ' ';
    text += std::to_string(ids[i]);
  }
  return text;
}

}  // namespace mt
