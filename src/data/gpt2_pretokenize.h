// Owns GPT-2's pre-tokenisation: the split of text into the pieces its regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches, written as a hand scanner (no regex engine) over UTF-8. \s is Python `regex`'s
// (White_Space); bytes that are not well-formed UTF-8 count as [^\s\p{L}\p{N}] characters, so every
// byte string splits and the pieces always concatenate back to the input.
#pragma once

#include <string_view>

namespace mt {

class Gpt2PreTokenizer {
 public:
  explicit Gpt2PreTokenizer(std::string_view text) : text_(text) {}
  // The next piece, or false at the end. Pieces are views into the text, in order, covering it.
  bool next(std::string_view& piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace mt
