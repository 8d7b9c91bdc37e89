// Owns the Llama 3 / Qwen2 split scanner (see split_pretokenize.h).
#include "data/split_pretokenize.h"

#include "data/unicode.h"

namespace mt {

std::optional<SplitPattern> known_split_pattern(std::string_view regex) {
  static constexpr std::string_view k_llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view k_qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (regex == k_llama3) return SplitPattern::llama3;
  if (regex == k_qwen2) return SplitPattern::qwen2;
  return std::nullopt;
}

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
  if (t[pos] != '\'') return 0;
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

size_t line_breaks_end(std::string_view t, size_t pos) {
  while (pos < t.size() && is_line_break(t[pos])) ++pos;
  return pos;
}

}  // namespace

bool SplitPreTokenizer::next(std::string_view& piece) {
  const std::string_view t = text_;
  const size_t start = pos_;
  if (start >= t.size()) return false;
  size_t end = start + contraction_length(t, start);
  const ClassStep first = class_at(t, start);
  const size_t second = start + first.length;
  if (end > start) {
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  } else if (first.cls == CharClass::letter) {
    end = class_run_end(t, start, CharClass::letter);  // [^\r\n\p{L}\p{N}]?\p{L}+ with the option empty
  } else if (first.cls != CharClass::number && !is_line_break(t[start]) && second < t.size() &&
             class_at(t, second).cls == CharClass::letter) {
    end = class_run_end(t, second, CharClass::letter);  // ... with the option taken
  } else if (first.cls == CharClass::number) {
    end = class_run_end(t, start, CharClass::number, static_cast<size_t>(max_digits_));  // \p{N}{1,3} or \p{N}
  } else if (first.cls == CharClass::other) {
    end = line_breaks_end(t, class_run_end(t, start, CharClass::other));  // [^\s\p{L}\p{N}]+[\r\n]*
  } else if (t[start] == ' ' && second < t.size() && class_at(t, second).cls == CharClass::other) {
    end = line_breaks_end(t, class_run_end(t, second, CharClass::other));  // the same after ' '
  } else {
    // White space. \s*[\r\n]+ backtracks to the run's last line break; without one,
    // \s+(?!\S) gives the run back one unit when a non-space follows, unless that leaves nothing
    // and \s+ takes the single unit.
    size_t last = start, after_break = 0;
    end = start;
    while (end < t.size()) {
      const ClassStep step = class_at(t, end);
      if (step.cls != CharClass::space) break;
      last = end;
      end += step.length;
      if (is_line_break(t[last])) after_break = end;
    }
    if (after_break > 0) {
      end = after_break;
    } else if (end < t.size() && last > start) {
      end = last;
    }
  }
  piece = t.substr(start, end - start);
  pos_ = end;
  return true;
}

}  // namespace mt
