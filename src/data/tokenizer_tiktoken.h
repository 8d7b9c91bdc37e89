// Owns Megatron's TikTokenizer (--tokenizer-type TikTokenizer --tokenizer-model FILE), as
// megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py lays it out:
//   - ids 0..N-1 are the special tokens (N = --tiktoken-num-special-tokens, default 1000): the list
//     --tokenizer-special-tokens (default <unk> <s> </s> <mask> <pad> <cls> <sep>, which a custom
//     list must include), then fillers <SPECIAL_i>;
//   - the vocabulary entry of rank r is id r + N, and the vocabulary is cut to its first
//     --vocab-size - N entries (--vocab-size defaults to 131072);
//   - text is split by Megatron's own regex (--tiktoken-pattern v1 or v2, default v2; see
//     split_pretokenize.h), not the file's; special tokens inside text are matched (tiktoken's
//     allowed_special="all"); each piece that is a token is that token, others are merged by
//     tiktoken's rule (the adjacent pair whose concatenation has the lowest rank);
//   - eod is </s>, bos <s>, pad <pad>; decode joins the bytes, ill-formed UTF-8 becoming U+FFFD.
// FILE is Megatron's JSON list of {rank, token_bytes (base64), token_str} whose first 256 entries
// are the bytes 0..255 in order, or an OpenAI .tiktoken file ("base64 rank" per line).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/split_pretokenize.h"
#include "data/tokenizer.h"

namespace mt {

struct TikTokenOptions {
  std::string path;
  SplitPattern pattern = SplitPattern::tiktoken_v2;
  int64_t num_special_tokens = 1000;
  std::vector<std::string> special_tokens;  // empty: Megatron's seven
  int64_t vocab_size = 131072;
};

class TikTokenizer : public Tokenizer {
 public:
  // Throws mt::Error naming the flag, the file and what is wrong.
  explicit TikTokenizer(const TikTokenOptions& options);
  ~TikTokenizer() override;

  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod() const override { return eod_; }
  std::optional<int64_t> bos() const override { return bos_; }
  std::optional<int64_t> pad() const override { return pad_; }

  // A token's bytes (a special token's text); for tests and messages.
  std::string_view token_bytes(int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t vocab_size_, eod_, bos_, pad_;
};

// Megatron's --tiktoken-pattern value (v1 or v2) as a pattern; mt::Error for another.
SplitPattern tiktoken_pattern(const std::string& name);

}  // namespace mt
