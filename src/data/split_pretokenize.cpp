// Owns the split scanners (see split_pretokenize.h).
#include "data/split_pretokenize.h"

#include "data/unicode.h"

namespace mt {

std::optional<SplitPattern> known_split_pattern(std::string_view regex) {
  static constexpr std::string_view k_llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view k_qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view k_o200k =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
      R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == k_llama3) return SplitPattern::llama3;
  if (regex == k_qwen2) return SplitPattern::qwen2;
  if (regex == k_o200k) return SplitPattern::o200k;
  return std::nullopt;
}

SplitPreTokenizer::SplitPreTokenizer(std::string_view text, SplitPattern pattern)
    : text_(text),
      max_digits_(pattern == SplitPattern::llama3 || pattern == SplitPattern::o200k ? 3 : 1),
      contraction_first_(pattern == SplitPattern::llama3 || pattern == SplitPattern::qwen2),
      contraction_suffix_(pattern == SplitPattern::o200k),
      cased_(pattern == SplitPattern::o200k || pattern == SplitPattern::tiktoken_v2),
      slash_tail_(cased_) {}

namespace {

// Whether the code point at `pos` is `lower` or its upper case (ASCII), or, for 's', the long s
// U+017F, which Unicode case-insensitive matching folds to 's'.
size_t folded_letter(std::string_view t, size_t pos, char lower) {
  if (pos >= t.size()) return 0;
  if (t[pos] == lower || t[pos] == lower - 'a' + 'A') return 1;
  if (lower == 's' && t.substr(pos, 2) == "\xC5\xBF") return 2;
  return 0;
}

// Length of the case-insensitive contraction ('s 't 're 've 'm 'll 'd) at `pos`, or 0.
size_t contraction_length(std::string_view t, size_t pos) {
  if (pos >= t.size() || t[pos] != '\'') return 0;
  for (const char c : {'s', 't', 'm', 'd'})
    if (const size_t n = folded_letter(t, pos + 1, c)) return 1 + n;
  for (const char* pair : {"re", "ve", "ll"}) {
    const size_t a = folded_letter(t, pos + 1, pair[0]);
    const size_t b = a ? folded_letter(t, pos + 1 + a, pair[1]) : 0;
    if (b) return 1 + a + b;
  }
  return 0;
}

bool is_line_break(char c) { return c == '\r' || c == '\n'; }

// [^\r\n\p{L}\p{N}]: white space but line breaks, and everything neither letter nor number.
bool is_prefix(std::string_view t, size_t pos, const ClassStep& step) {
  return (step.cls == CharClass::space || step.cls == CharClass::other) && !is_line_break(t[pos]);
}

// The case class of the unit at `pos` (ill-formed bytes have none).
CaseClass case_at(std::string_view t, size_t pos, uint32_t* length) {
  const Utf8Step step = utf8_next(t, pos);
  *length = step.length;
  return step.valid ? case_class(step.code_point) : CaseClass::none;
}
bool not_lower(CaseClass c) { return c == CaseClass::upper || c == CaseClass::other_letter || c == CaseClass::mark; }
bool not_upper(CaseClass c) { return c == CaseClass::lower || c == CaseClass::other_letter || c == CaseClass::mark; }

}  // namespace

size_t SplitPreTokenizer::cased_letters_end(size_t start) const {
  const std::string_view t = text_;
  const ClassStep first = class_at(t, start);
  uint32_t n = 0;
  // P? is greedy: with the prefix taken first, then without it.
  for (const size_t from : {is_prefix(t, start, first) ? start + first.length : std::string_view::npos, start}) {
    if (from == std::string_view::npos) continue;
    // U* W+: the maximal U run; W+ right after it, or else U* gives units back until one is a W
    // unit, which W+ then takes alone (the units after it in the run are U but not W).
    size_t run_end = from, last_w_end = 0;
    while (run_end < t.size()) {
      const CaseClass c = case_at(t, run_end, &n);
      if (!not_lower(c)) break;
      run_end += n;
      if (not_upper(c)) last_w_end = run_end;
    }
    size_t w_end = run_end;
    while (w_end < t.size() && not_upper(case_at(t, w_end, &n))) w_end += n;
    if (w_end > run_end) return w_end;
    if (last_w_end > 0) return last_w_end;
    // U+ W*: the U run, then any W units (none: the run already ended at a non-W unit).
    if (run_end > from) return run_end;
  }
  return start;
}

bool SplitPreTokenizer::next(std::string_view& piece) {
  const std::string_view t = text_;
  const size_t start = pos_;
  if (start >= t.size()) return false;
  const ClassStep first = class_at(t, start);
  const size_t second = start + first.length;
  size_t end = contraction_first_ ? start + contraction_length(t, start) : start;
  if (end > start) {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  } else if (cased_ && (end = cased_letters_end(start)) > start) {
    if (contraction_suffix_) end += contraction_length(t, end);
  } else if (!cased_ && first.cls == CharClass::letter) {
    end = class_run_end(t, start, CharClass::letter);  // [^\r\n\p{L}\p{N}]?\p{L}+ with the option empty
  } else if (!cased_ && is_prefix(t, start, first) && second < t.size() && class_at(t, second).cls == CharClass::letter) {
    end = class_run_end(t, second, CharClass::letter);  // ... with the option taken
  } else if (first.cls == CharClass::number) {
    end = class_run_end(t, start, CharClass::number, max_digits_);  // \p{N}{1,3} or \p{N}
  } else if (first.cls == CharClass::other ||
             (t[start] == ' ' && second < t.size() && class_at(t, second).cls == CharClass::other)) {
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (or `[\r\n/]*`)
    end = class_run_end(t, t[start] == ' ' ? second : start, CharClass::other);
    while (end < t.size() && (is_line_break(t[end]) || (slash_tail_ && t[end] == '/'))) ++end;
  } else {
    // White space. \s*[\r\n]+ backtracks to the run's last line break (an ASCII byte, so a byte
    // search finds it); without one, \s+(?!\S)|\s+.
    const size_t run_end = class_run_end(t, start, CharClass::space);
    const size_t last_break = t.substr(start, run_end - start).find_last_of("\r\n");
    end = last_break != std::string_view::npos ? start + last_break + 1 : white_space_piece_end(t, start);
  }
  piece = t.substr(start, end - start);
  pos_ = end;
  return true;
}

}  // namespace mt
