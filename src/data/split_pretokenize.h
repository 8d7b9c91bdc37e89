// Owns the pre-tokenisation of the Hugging Face `Split` pre-tokenizers whose regex megatron.cpp
// knows: Llama 3's (also tiktoken's cl100k_base) and Qwen2's, which differ only in how many digits
// form one piece:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// written as a hand scanner like gpt2_pretokenize.h (no regex engine): each branch is one
// alternative, tried in the regex's order, with its backtracking worked out by hand. Bytes that are
// not well-formed UTF-8 count as [^\s\p{L}\p{N}] characters, so every byte string splits and the
// pieces concatenate back to the input.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mt {

enum class SplitPattern { llama3, qwen2 };

// The pattern a tokenizer.json `Split` regex spells, or nullopt for one not implemented.
std::optional<SplitPattern> known_split_pattern(std::string_view regex);

class SplitPreTokenizer {
 public:
  SplitPreTokenizer(std::string_view text, SplitPattern pattern)
      : text_(text), max_digits_(pattern == SplitPattern::llama3 ? 3 : 1) {}
  // The next piece, or false at the end. Pieces are views into the text, in order, covering it.
  bool next(std::string_view& piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
  int max_digits_;
};

}  // namespace mt
