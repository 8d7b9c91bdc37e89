// Owns the tokenizer interface every data path shares (Megatron's MegatronTokenizer): encode,
// decode, vocabulary size and the special ids, and the factory that builds one from the
// tokenizer flags (--tokenizer-type and its files).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `out`; lets a caller (preprocess) reuse one buffer across
  // documents. What each tokenizer implements.
  virtual void encode_into(std::string_view text, std::vector<int32_t>& out) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> out;
    encode_into(text, out);
    return out;
  }
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Without the special tokens a post-processor adds around every text (add_special_tokens=False),
  // for text that already spells them, such as a rendered chat template. Most tokenizers add none.
  virtual void encode_without_specials(std::string_view text, std::vector<int32_t>& out) const { encode_into(text, out); }
  // The chat template the tokenizer files carry (Jinja), or empty.
  virtual std::string chat_template() const { return {}; }
  // The text `generated` adds after `prompt`: decode(prompt + generated) past decode(prompt), so
  // that a continuation keeps the leading space a SentencePiece-style decoder strips from a text's
  // first token. decode(generated) when the prompt's text is not a prefix (a split character).
  virtual std::string decode_continuation(std::span<const int32_t> prompt, std::span<const int32_t> generated) const;
  // What Megatron's tokenizer.vocab_size reports (before --make-vocab-size-divisible-by padding).
  virtual int64_t vocab_size() const = 0;
  virtual int64_t eod() const = 0;
  // Ids the tokenizer does not define are nullopt (Megatron's datasets then use -1 as pad).
  virtual std::optional<int64_t> bos() const { return std::nullopt; }
  virtual std::optional<int64_t> pad() const { return std::nullopt; }
};

// The tokenizer flags, as Megatron names them.
struct TokenizerOptions {
  std::string type;             // --tokenizer-type
  std::string vocab_file;       // --vocab-file
  std::string merge_file;       // --merge-file
  std::string model;            // --tokenizer-model
  std::optional<int64_t> vocab_size;  // --vocab-size (NullTokenizer)
  std::optional<int64_t> null_tokenizer_eod_id;  // --null-tokenizer-eod-id (NullTokenizer)
  int64_t vocab_extra_ids = 0;  // --vocab-extra-ids (SentencePieceTokenizer)
  std::string tiktoken_pattern = "v2";         // --tiktoken-pattern (TikTokenizer)
  int64_t tiktoken_num_special_tokens = 1000;  // --tiktoken-num-special-tokens (TikTokenizer)
  std::vector<std::string> special_tokens;     // --tokenizer-special-tokens (TikTokenizer)
};

// Types: NullTokenizer (--vocab-size), GPT2BPETokenizer (--vocab-file, --merge-file),
// SentencePieceTokenizer / GPTSentencePieceTokenizer / Llama2Tokenizer (--tokenizer-model),
// HuggingFaceTokenizer (--tokenizer-model: a directory with tokenizer.json), TikTokenizer
// (--tokenizer-model, --tiktoken-*, --tokenizer-special-tokens, --vocab-size).
// Throws mt::Error naming the missing flag or unreadable file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace mt
