// Owns UTF-8 stepping, the code point classes and replacement decoding (see unicode.h).
#include "data/unicode.h"

#include <algorithm>
#include <array>
#include <span>

namespace mt {
namespace {
#include "data/unicode_tables.inc"

bool in_ranges(std::span<const CodePointRange> ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t value, const CodePointRange& r) { return value < r.lo; });
  return it != ranges.begin() && cp <= std::prev(it)->hi;
}

CharClass lookup_class(uint32_t cp) {
  if (in_ranges(k_letter_ranges, cp)) return CharClass::letter;
  if (in_ranges(k_number_ranges, cp)) return CharClass::number;
  if (in_ranges(k_white_space_ranges, cp)) return CharClass::space;
  return CharClass::other;
}

CaseClass lookup_case(uint32_t cp) {
  if (in_ranges(k_mark_ranges, cp)) return CaseClass::mark;
  if (!in_ranges(k_letter_ranges, cp)) return CaseClass::none;
  if (in_ranges(k_upper_title_ranges, cp)) return CaseClass::upper;
  if (in_ranges(k_lower_ranges, cp)) return CaseClass::lower;
  return CaseClass::other_letter;
}

// The Basic Multilingual Plane as a flat table (64 KiB, built once): most text never leaves it.
const std::array<CharClass, 0x10000>& bmp_classes() {
  static const auto table = [] {
    std::array<CharClass, 0x10000> t{};
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = lookup_class(cp);
    return t;
  }();
  return table;
}
}  // namespace

namespace detail {
// Letters, digits and \t \n \v \f \r space; the rest of ASCII is `other`.
#define MT_O CharClass::other
#define MT_L CharClass::letter
#define MT_N CharClass::number
#define MT_S CharClass::space
const CharClass k_ascii_class[128] = {
    MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_S, MT_S, MT_S, MT_S, MT_S, MT_O, MT_O,  // 0x00
    MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O,  // 0x10
    MT_S, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O,  // 0x20
    MT_N, MT_N, MT_N, MT_N, MT_N, MT_N, MT_N, MT_N, MT_N, MT_N, MT_O, MT_O, MT_O, MT_O, MT_O, MT_O,  // 0x30
    MT_O, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L,  // 0x40
    MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_O, MT_O, MT_O, MT_O, MT_O,  // 0x50
    MT_O, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L,  // 0x60
    MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_L, MT_O, MT_O, MT_O, MT_O, MT_O,  // 0x70
};
#undef MT_O
#undef MT_L
#undef MT_N
#undef MT_S
}  // namespace detail

size_t white_space_piece_end(std::string_view t, size_t start) {
  size_t last = start, end = start;
  while (end < t.size()) {
    const ClassStep step = class_at(t, end);
    if (step.cls != CharClass::space) break;
    last = end;
    end += step.length;
  }
  return end < t.size() && last > start ? last : end;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

CharClass char_class(uint32_t code_point) {
  if (code_point < 0x10000) return bmp_classes()[code_point];
  return lookup_class(code_point);
}

CaseClass case_class(uint32_t code_point) {
  static const auto bmp = [] {
    std::array<CaseClass, 0x10000> t{};
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = lookup_case(cp);
    return t;
  }();
  return code_point < 0x10000 ? bmp[code_point] : lookup_case(code_point);
}

Utf8Step utf8_next(std::string_view text, size_t pos) {
  const auto at = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = at(pos);
  if (b0 < 0x80) return {b0, 1, true};
  // Unicode Table 3-7: the lead byte fixes the length and the range of the second byte.
  uint32_t need = 0, cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 1, false};
  }
  uint32_t len = 1;
  for (uint32_t k = 0; k < need; ++k) {
    if (pos + len >= text.size()) return {0, len, false};
    const unsigned char b = at(pos + len);
    if (b < lo || b > hi) return {0, len, false};
    cp = (cp << 6) | (b & 0x3F);
    ++len;
    lo = 0x80, hi = 0xBF;
  }
  return {cp, len, true};
}

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Utf8Step step = utf8_next(bytes, pos);
    if (step.valid) {
      out.append(bytes.substr(pos, step.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += step.length;
  }
  return out;
}

const char* unicode_tables_version() { return k_unicode_tables_version; }

}  // namespace mt
