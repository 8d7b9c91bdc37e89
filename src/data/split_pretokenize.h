// Owns the pre-tokenisation regexes megatron.cpp knows beyond GPT-2's, as hand scanners like
// gpt2_pretokenize.h (no regex engine): each branch is one alternative, tried in the regex's order,
// with its backtracking worked out by hand.
//   llama3 (also tiktoken's cl100k_base) and qwen2 (single digits):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//     \s*[\r\n]+|\s+(?!\S)|\s+
//   tiktoken_v1 (Megatron's TikTokenizer v1): the same without contractions, single digits.
//   o200k (tiktoken's o200k_base) and tiktoken_v2 (Megatron's v2: no contractions, single digits):
//     [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?|
//     [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?|
//     \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Bytes that are not well-formed UTF-8 count as [^\s\p{L}\p{N}] characters, so every byte string
// splits and the pieces concatenate back to the input.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mt {

enum class SplitPattern { llama3, qwen2, o200k, tiktoken_v1, tiktoken_v2 };

// The pattern a tokenizer.json `Split` regex spells, or nullopt for one not implemented.
std::optional<SplitPattern> known_split_pattern(std::string_view regex);

class SplitPreTokenizer {
 public:
  SplitPreTokenizer(std::string_view text, SplitPattern pattern);
  // The next piece, or false at the end. Pieces are views into the text, in order, covering it.
  bool next(std::string_view& piece);

 private:
  // End of the cased letter alternatives (o200k, v2) at `start`, or `start` when neither matches.
  size_t cased_letters_end(size_t start) const;

  std::string_view text_;
  size_t pos_ = 0;
  size_t max_digits_;
  bool contraction_first_;   // (?i:'s|...) as the first alternative (llama3, qwen2)
  bool contraction_suffix_;  // (?i:'s|...)? after the letters (o200k)
  bool cased_;               // the two cased letter alternatives (o200k, v2)
  bool slash_tail_;          // punctuation runs end in [\r\n/]* rather than [\r\n]*
};

}  // namespace mt
