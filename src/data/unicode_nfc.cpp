// Owns NFC (see unicode_nfc.h).
#include "data/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "data/unicode.h"

namespace mt {
namespace {

struct CombiningClassRange {
  uint32_t lo, hi;
  uint8_t value;
};
struct Decomposition {
  uint32_t code_point, first, second;  // second 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;
};
#include "data/unicode_nfc_tables.inc"

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An ill-formed byte, carried through as a starter that composes with nothing.
constexpr uint32_t kRawByte = 0x80000000u;

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300 || cp & kRawByte) return 0;
  const auto it = std::upper_bound(std::begin(k_combining_classes), std::end(k_combining_classes), cp,
                                   [](uint32_t v, const CombiningClassRange& r) { return v < r.lo; });
  return it != std::begin(k_combining_classes) && cp <= std::prev(it)->hi ? std::prev(it)->value : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(k_decompositions), std::end(k_decompositions), cp,
                                   [](const Decomposition& d, uint32_t v) { return d.code_point < v; });
  if (it == std::end(k_decompositions) || it->code_point != cp) return out.push_back(cp);
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// The primary composite of (first, second), or 0.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto it = std::lower_bound(std::begin(k_compositions), std::end(k_compositions), std::pair{first, second},
                                   [](const Composition& c, const std::pair<uint32_t, uint32_t>& v) {
                                     return c.first != v.first ? c.first < v.first : c.second < v.second;
                                   });
  return it != std::end(k_compositions) && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

const char* nfc_tables_version() { return k_nfc_tables_version; }

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  // Decompose.
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Step step = utf8_next(text, pos);
    if (step.valid) {
      decompose(step.code_point, cps);
    } else {
      for (uint32_t k = 0; k < step.length; ++k) cps.push_back(kRawByte | static_cast<unsigned char>(text[pos + k]));
    }
    pos += step.length;
  }
  // Canonical ordering: each run of non-starters sorted (stably) by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Compose: each character with the last starter, unless something between blocks it (a starter,
  // or a character of the same or a higher class).
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;
  uint8_t last_class = 0;
  for (const uint32_t cp : cps) {
    const uint8_t cls = combining_class(cp);
    const bool blocked = starter == SIZE_MAX || (out.size() - 1 != starter && (last_class == 0 || last_class >= cls));
    if (!blocked && !(cp & kRawByte) && !(out[starter] & kRawByte)) {
      if (const uint32_t composite = compose(out[starter], cp)) {
        out[starter] = composite;
        continue;
      }
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (const uint32_t cp : out) {
    if (cp & kRawByte) result += static_cast<char>(cp & 0xFF);
    else append_utf8(result, cp);
  }
  return result;
}

}  // namespace mt
