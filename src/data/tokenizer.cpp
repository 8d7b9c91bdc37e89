// Owns make_tokenizer: --tokenizer-type and its file flags -> one Tokenizer (see tokenizer.h).
#include "data/tokenizer.h"

#include "base/error.h"
#include "data/tokenizer_gpt2.h"
#include "data/tokenizer_hf.h"
#include "data/tokenizer_null.h"
#include "data/tokenizer_sentencepiece.h"
#include "data/tokenizer_tiktoken.h"

namespace mt {

std::string Tokenizer::decode_continuation(std::span<const int32_t> prompt, std::span<const int32_t> generated) const {
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string head = decode(prompt), whole = decode(all);
  if (whole.compare(0, head.size(), head) == 0) return whole.substr(head.size());
  return decode(generated);
}

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options) {
  const std::string& type = options.type;
  MT_CHECK(!type.empty()) << "--tokenizer-type is required (NullTokenizer, GPT2BPETokenizer, SentencePieceTokenizer, ...)";
  if (type == "NullTokenizer") {
    MT_CHECK(options.vocab_size.has_value()) << "--tokenizer-type NullTokenizer needs --vocab-size";
    return std::make_unique<NullTokenizer>(*options.vocab_size, options.null_tokenizer_eod_id);
  }
  if (type == "GPT2BPETokenizer") return std::make_unique<Gpt2BpeTokenizer>(options.vocab_file, options.merge_file);
  if (type == "SentencePieceTokenizer")
    return std::make_unique<SentencePieceTokenizer>(options.model, SentencePieceFlavor::megatron, options.vocab_extra_ids);
  if (type == "GPTSentencePieceTokenizer")
    return std::make_unique<SentencePieceTokenizer>(options.model, SentencePieceFlavor::gpt, options.vocab_extra_ids);
  if (type == "Llama2Tokenizer")
    return std::make_unique<SentencePieceTokenizer>(options.model, SentencePieceFlavor::llama2, options.vocab_extra_ids);
  if (type == "HuggingFaceTokenizer") return std::make_unique<HuggingFaceTokenizer>(options.model);
  if (type == "TikTokenizer") {
    TikTokenOptions t;
    t.path = options.model;
    t.pattern = tiktoken_pattern(options.tiktoken_pattern);
    t.num_special_tokens = options.tiktoken_num_special_tokens;
    t.special_tokens = options.special_tokens;
    if (options.vocab_size) t.vocab_size = *options.vocab_size;
    return std::make_unique<TikTokenizer>(t);
  }
  MT_FAIL() << "--tokenizer-type " << type
            << " is not supported; use NullTokenizer, GPT2BPETokenizer, SentencePieceTokenizer, "
               "GPTSentencePieceTokenizer, Llama2Tokenizer, HuggingFaceTokenizer or TikTokenizer";
}

}  // namespace mt
