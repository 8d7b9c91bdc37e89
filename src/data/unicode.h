// Owns the UTF-8 and Unicode pieces the tokenizers need: stepping through UTF-8 text one code
// point (or one ill-formed subpart) at a time, the letter / number / white-space classes of GPT-2's
// pre-tokenisation regex, and Python's errors='replace' decoding of byte strings.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mt {

struct CodePointRange {
  uint32_t lo, hi;  // inclusive
};

// \p{L}, \p{N}, \s (Python `regex` = the White_Space property) and everything else.
enum class CharClass : uint8_t { other, letter, number, space };

// One step of UTF-8 decoding: `length` bytes starting at the position. `valid` is false for a
// maximal ill-formed subpart (Unicode 3.9, what Python's decoder replaces with one U+FFFD); then
// `code_point` is meaningless.
struct Utf8Step {
  uint32_t code_point;
  uint32_t length;
  bool valid;
};
Utf8Step utf8_next(std::string_view text, size_t pos);

CharClass char_class(uint32_t code_point);

// The finer split o200k's and Megatron's tiktoken v2 regexes make: upper = \p{Lu} or \p{Lt},
// lower = \p{Ll}, other_letter = \p{Lm} or \p{Lo}, mark = \p{M}. Their [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
// is "not lower" among these, [\p{Ll}\p{Lm}\p{Lo}\p{M}] is "not upper".
enum class CaseClass : uint8_t { none, upper, lower, other_letter, mark };
CaseClass case_class(uint32_t code_point);

// The class of the unit at `pos` (ill-formed bytes are `other`) and its length in bytes.
struct ClassStep {
  CharClass cls;
  uint32_t length;
};
inline ClassStep class_at(std::string_view text, size_t pos);

// End of the run of units of class `cls` from `pos`, taking at most `limit` of them.
inline size_t class_run_end(std::string_view text, size_t pos, CharClass cls, size_t limit = SIZE_MAX);

// The end of the pre-tokenizers' `\s+(?!\S)|\s+` at `pos` (a white-space unit): the white-space
// run, given back one unit when a non-space follows it, unless that would leave nothing.
size_t white_space_piece_end(std::string_view text, size_t pos);

// Appends the UTF-8 of a code point (below 0x110000).
void append_utf8(std::string& out, uint32_t code_point);

// bytes.decode('utf-8', errors='replace'): every maximal ill-formed subpart becomes U+FFFD.
std::string utf8_replace_invalid(std::string_view bytes);

// The Unicode version of the class tables (tools/tokenizer/gen_unicode_tables.js).
const char* unicode_tables_version();

namespace detail {
extern const CharClass k_ascii_class[128];
}

inline ClassStep class_at(std::string_view text, size_t pos) {
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte < 0x80) return {detail::k_ascii_class[byte], 1};
  const Utf8Step step = utf8_next(text, pos);
  return {step.valid ? char_class(step.code_point) : CharClass::other, step.length};
}

inline size_t class_run_end(std::string_view text, size_t pos, CharClass cls, size_t limit) {
  for (size_t taken = 0; pos < text.size() && taken < limit; ++taken) {
    const ClassStep step = class_at(text, pos);
    if (step.cls != cls) break;
    pos += step.length;
  }
  return pos;
}

}  // namespace mt
