// Owns Unicode normalization form C (canonical decomposition, canonical ordering, canonical
// composition; Unicode Standard Annex #15) over UTF-8, for tokenizer.json's NFC normalizer (Qwen2
// and Qwen3 files use it). The tables come from the Unicode Character Database
// (tools/tokenizer/gen_nfc_tables.py). Bytes that are not well-formed UTF-8 pass through
// unchanged and block composition across them.
#pragma once

#include <string>
#include <string_view>

namespace mt {

std::string nfc(std::string_view text);

// The Unicode version of the tables.
const char* nfc_tables_version();

}  // namespace mt
