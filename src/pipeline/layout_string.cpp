#include "pipeline/layout_string.h"

#include <cctype>

#include "base/error.h"

namespace mt {

namespace {

// The count after a '*' at text[at] (at points at the '*'); advances `at` past the digits.
int64_t repeat_count(const std::string& text, size_t& at, const std::string& layout) {
  ++at;
  const size_t start = at;
  while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])) && at - start < 6) ++at;
  MT_CHECK(at > start) << "--pipeline-model-parallel-layout " << layout << ": '*' must be followed by a count";
  return std::stoll(text.substr(start, at - start));
}

}  // namespace

std::vector<std::string> parse_pipeline_layout(const std::string& layout) {
  std::string text;
  for (char c : layout)
    if (c != ',' && !std::isspace(static_cast<unsigned char>(c))) text += c;
  // Unroll "(group)*N", then "x*N", as Megatron does (groups do not nest).
  std::string unrolled;
  for (size_t at = 0; at < text.size();) {
    if (text[at] == '(') {
      const size_t close = text.find(')', at);
      MT_CHECK(close != std::string::npos) << "--pipeline-model-parallel-layout " << layout << ": '(' without ')'";
      const std::string group = text.substr(at + 1, close - at - 1);
      MT_CHECK(!group.empty() && group.find('(') == std::string::npos && close + 1 < text.size() &&
               text[close + 1] == '*')
          << "--pipeline-model-parallel-layout " << layout << ": a group is written (letters)*N, without nesting";
      at = close + 1;
      const int64_t n = repeat_count(text, at, layout);
      for (int64_t i = 0; i < n; ++i) unrolled += group;
    } else {
      unrolled += text[at++];
    }
  }
  std::string letters;
  for (size_t at = 0; at < unrolled.size(); ++at) {
    MT_CHECK(unrolled[at] != '*') << "--pipeline-model-parallel-layout " << layout << ": '*' must follow a letter";
    if (at + 1 < unrolled.size() && unrolled[at + 1] == '*') {
      const char c = unrolled[at];
      ++at;
      const int64_t n = repeat_count(unrolled, at, layout);
      --at;
      letters.append(static_cast<size_t>(n), c);
    } else {
      letters += unrolled[at];
    }
  }
  std::vector<std::string> stages(1);
  for (char c : letters) {
    if (c == '|') {
      stages.emplace_back();
      continue;
    }
    MT_CHECK(c == 'E' || c == 't' || c == 'm' || c == 'L')
        << "--pipeline-model-parallel-layout " << layout << ": unknown layer letter '" << c
        << "' (E embedding, t transformer layer, m multi-token prediction layer, L loss)";
    stages.back() += c;
  }
  return stages;
}

}  // namespace mt
