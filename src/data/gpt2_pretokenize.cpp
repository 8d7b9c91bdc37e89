// Owns the GPT-2 pre-tokenisation scanner (see gpt2_pretokenize.h). Each branch below is one
// alternative of the regex, tried in the regex's order.
#include "data/gpt2_pretokenize.h"

#include "data/unicode.h"

namespace mt {
namespace {

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive) at `pos`, or 0.
size_t contraction_length(std::string_view t, size_t pos) {
  if (t[pos] != '\'' || pos + 1 >= t.size()) return 0;
  const char a = t[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= t.size()) return 0;
  const char b = t[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}


}  // namespace

bool Gpt2PreTokenizer::next(std::string_view& piece) {
  const std::string_view t = text_;
  const size_t start = pos_;
  if (start >= t.size()) return false;
  size_t end = 0;
  if (const size_t n = contraction_length(t, start)) {
    end = start + n;
  } else {
    const ClassStep first = class_at(t, start);
    if (t[start] == ' ' && start + 1 < t.size()) {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` with the optional space taken.
      const ClassStep second = class_at(t, start + 1);
      if (second.cls != CharClass::space) end = class_run_end(t, start + 1, second.cls);
    }
    if (end == 0 && first.cls != CharClass::space) {
      end = class_run_end(t, start, first.cls);
    } else if (end == 0) {
      end = white_space_piece_end(t, start);  // `\s+(?!\S)|\s+`
    }
  }
  piece = t.substr(start, end - start);
  pos_ = end;
  return true;
}

}  // namespace mt
