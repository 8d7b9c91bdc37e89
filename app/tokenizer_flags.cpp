// Owns tokenizer_options (see tokenizer_flags.h).
#include "app/tokenizer_flags.h"

#include "base/error.h"

namespace mt {

TokenizerOptions tokenizer_options(const Options& o) {
  TokenizerOptions t;
  if (o.has("--tokenizer-type")) {
    t.type = o.text("--tokenizer-type");
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
  return t;
}

}  // namespace mt
