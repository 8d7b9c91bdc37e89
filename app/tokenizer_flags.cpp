// Owns tokenizer_options (see tokenizer_flags.h).
#include "app/tokenizer_flags.h"

#include <filesystem>

#include "base/error.h"

namespace mt {

TokenizerOptions tokenizer_options(const Options& o) {
  TokenizerOptions t;
  if (o.has("--tokenizer-type")) {
    t.type = o.text("--tokenizer-type");
  } else if (o.has("--vocab-file") && o.has("--merge-file")) {
    t.type = "GPT2BPETokenizer";  // Megatron's scripts pass GPT-2's files alone: its parser's old default
  } else {
    MT_CHECK(o.has("--vocab-size")) << "pass --tokenizer-type (e.g. GPT2BPETokenizer with --vocab-file and "
                                    << "--merge-file) or --vocab-size V for the NullTokenizer";
    t.type = "NullTokenizer";
  }
  if (o.has("--vocab-file")) t.vocab_file = o.text("--vocab-file");
  if (o.has("--merge-file")) t.merge_file = o.text("--merge-file");
  if (o.has("--tokenizer-model")) t.model = o.text("--tokenizer-model");
  if (o.has("--vocab-size")) t.vocab_size = o.integer("--vocab-size");
  if (o.has("--null-tokenizer-eod-id")) t.null_tokenizer_eod_id = o.integer("--null-tokenizer-eod-id");
  if (o.has("--vocab-extra-ids")) t.vocab_extra_ids = o.integer("--vocab-extra-ids");
  if (o.has("--tiktoken-pattern")) t.tiktoken_pattern = o.text("--tiktoken-pattern");
  if (o.has("--tiktoken-num-special-tokens")) t.tiktoken_num_special_tokens = o.integer("--tiktoken-num-special-tokens");
  if (o.has("--tokenizer-special-tokens")) t.special_tokens = o.list("--tokenizer-special-tokens");
  return t;
}

bool has_tokenizer_flags(const Options& o) {
  for (const char* flag : {"--tokenizer-type", "--vocab-size", "--vocab-file", "--merge-file", "--tokenizer-model"})
    if (o.has(flag)) return true;
  return false;
}

nlohmann::json tokenizer_record(const TokenizerOptions& t) {
  const auto absolute = [](const std::string& path) {
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
  };
  nlohmann::json r = {{"type", t.type},
                      {"vocab_file", absolute(t.vocab_file)},
                      {"merge_file", absolute(t.merge_file)},
                      {"model", absolute(t.model)},
                      {"vocab_extra_ids", t.vocab_extra_ids},
                      {"tiktoken_pattern", t.tiktoken_pattern},
                      {"tiktoken_num_special_tokens", t.tiktoken_num_special_tokens},
                      {"special_tokens", t.special_tokens}};
  if (t.vocab_size) r["vocab_size"] = *t.vocab_size;
  if (t.null_tokenizer_eod_id) r["null_tokenizer_eod_id"] = *t.null_tokenizer_eod_id;
  return r;
}

TokenizerOptions tokenizer_options_from_record(const nlohmann::json& r, const std::string& where) {
  TokenizerOptions t;
  try {
    t.type = r.at("type").get<std::string>();
    t.vocab_file = r.at("vocab_file").get<std::string>();
    t.merge_file = r.at("merge_file").get<std::string>();
    t.model = r.at("model").get<std::string>();
    t.vocab_extra_ids = r.at("vocab_extra_ids").get<int64_t>();
    if (r.contains("vocab_size")) t.vocab_size = r.at("vocab_size").get<int64_t>();
    if (r.contains("null_tokenizer_eod_id")) t.null_tokenizer_eod_id = r.at("null_tokenizer_eod_id").get<int64_t>();
    // Absent in checkpoints written before TikTokenizer: Megatron's defaults.
    t.tiktoken_pattern = r.value("tiktoken_pattern", t.tiktoken_pattern);
    t.tiktoken_num_special_tokens = r.value("tiktoken_num_special_tokens", t.tiktoken_num_special_tokens);
    t.special_tokens = r.value("special_tokens", t.special_tokens);
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << where << ": its tokenizer record is malformed: " << e.what();
  }
  return t;
}

}  // namespace mt
