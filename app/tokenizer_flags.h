// Owns the mapping from the tokenizer flags (--tokenizer-type, --vocab-file, --merge-file,
// --tokenizer-model, --vocab-size, --null-tokenizer-eod-id, --vocab-extra-ids, --tiktoken-pattern,
// --tiktoken-num-special-tokens, --tokenizer-special-tokens) to
// TokenizerOptions, shared by `train` and `preprocess`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "app/options.h"
#include "data/tokenizer.h"

namespace mt {

// --tokenizer-type defaults to NullTokenizer when only --vocab-size is given.
TokenizerOptions tokenizer_options(const Options& o);
// Whether any tokenizer flag was given.
bool has_tokenizer_flags(const Options& o);

// The settings as a checkpoint records them (file paths made absolute, so a checkpoint used from
// another directory still finds them), and back; mt::Error naming `where` for a malformed record.
nlohmann::json tokenizer_record(const TokenizerOptions& t);
TokenizerOptions tokenizer_options_from_record(const nlohmann::json& record, const std::string& where);

}  // namespace mt
