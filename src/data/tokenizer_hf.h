// Owns Megatron's HuggingFaceTokenizer (--tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR):
// a Hugging Face `tokenizer.json` (with `tokenizer_config.json` beside it for the special tokens)
// run as the tokenizers library runs it, for the BPE pipelines of today's models:
//   - byte-level BPE: GPT-2's ByteLevel pre-tokenizer, or Llama 3's, Qwen2's or o200k's Split regex followed
//     by ByteLevel (split_pretokenize.h); `ignore_merges` (a piece that is a token is not merged);
//   - the NFC normalizer (Qwen2, Qwen3; unicode_nfc.h);
//   - SentencePiece-style BPE (Llama 2, Mistral): Prepend / Replace normalizers or the Metaspace
//     pre-tokenizer, characters as initial symbols, `byte_fallback` to <0xXX> tokens, `unk_token`
//     with `fuse_unk`;
//   - added tokens matched in the raw text before anything else (leftmost, then longest; `lstrip` /
//     `rstrip` eat the neighbouring white space);
//   - TemplateProcessing post-processors (the BOS Llama 3 and Mistral put in front), applied on every
//     encode, as Megatron's tokenize calls `tokenizer(text).input_ids`;
//   - decoders ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, and the config's
//     `clean_up_tokenization_spaces`.
// Anything else a file uses (another model type, normalizer, pre-tokenizer or regex) is refused at
// load, by name. vocab_size counts every id (vocabulary and added tokens, len(tokenizer));
// eod = the config's eos_token; bos and pad as the config names them.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace mt {

class HuggingFaceTokenizer : public Tokenizer {
 public:
  // `path`: a directory holding tokenizer.json (and tokenizer_config.json), or the tokenizer.json
  // file itself. Throws mt::Error naming the file and the unsupported or malformed part.
  explicit HuggingFaceTokenizer(const std::string& path);
  ~HuggingFaceTokenizer() override;

  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  // Without the post-processor's special tokens (add_special_tokens=False): for chat prompts,
  // whose template writes them itself.
  void encode_without_specials(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  int64_t eod() const override;
  std::optional<int64_t> bos() const override;
  std::optional<int64_t> pad() const override;

  // The token's spelling in tokenizer.json; for tests and messages.
  const std::string& token(int32_t id) const;
  // tokenizer_config.json's chat_template, empty when it has none.
  std::string chat_template() const override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mt
