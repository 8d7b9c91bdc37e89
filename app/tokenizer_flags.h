// Owns the mapping from the tokenizer flags (--tokenizer-type, --vocab-file, --merge-file,
// --tokenizer-model, --vocab-size, --null-tokenizer-eod-id, --vocab-extra-ids) to
// TokenizerOptions, shared by `train` and `preprocess`.
#pragma once

#include "app/options.h"
#include "data/tokenizer.h"

namespace mt {

// --tokenizer-type defaults to NullTokenizer when only --vocab-size is given.
TokenizerOptions tokenizer_options(const Options& o);

}  // namespace mt
