// Helpers shared by the tokenizer tests: temporary files, printable escapes of byte strings.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/unicode.h"
#include "testing.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <vector>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace mt::test {

// Where scripts/install-deps.sh puts the npm packages and the tokenizer files written from them.
inline const std::string k_npm_dir = std::string(MT_SOURCE_DIR) + "/third_party/npm";

// Bytes as C-style escapes beyond printable ASCII, so a failing text is readable in the log.
inline std::string escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}


// Seeded random texts from pools that stress the regex's classes and the merges: ASCII words,
// contractions, apostrophes, digits and letters of many scripts, marks (neither L nor N), emoji
// with joiners, every kind of white space but U+0085 (JS's \s and Python's disagree on it; see
// WhiteSpaceFollowsPython) and punctuation.
inline std::vector<std::string> random_texts(size_t count, uint32_t seed) {
  const std::vector<std::string> words = {"the", "The", "of", "and", "tokenizer", "Megatron", "GPT", "hello",
                                          "world", "don", "it", "we", "I", "a", "xyzzy", "qwertyuiop"};
  const std::vector<std::string> glue = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'", "''", "'S", "'x",
                                         "\"", ",", ".", "!", "?", "...", "--", "(", ")", "[", "]", "{", "}",
                                         "<|endoftext|>", "@", "#", "$", "%", "&", "*", "_", "/", "\\", "`", "~"};
  const std::vector<std::string> spaces = {" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ",
                                           "\t\t", " \t ", "\v", "\f"};
  // Code point ranges: [lo, hi] inclusive.
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x30, 0x39},     {0x41, 0x5A},     {0x61, 0x7A},     {0xA1, 0xFF},     {0x100, 0x17F},
      {0x391, 0x3C9},   {0x410, 0x44F},   {0x5D0, 0x5EA},   {0x620, 0x64A},   {0x660, 0x669},
      {0x900, 0x97F},   {0xE00, 0xE5B},   {0x300, 0x36F},   {0x3040, 0x30FF}, {0x4E00, 0x4E80},
      {0xAC00, 0xAC40}, {0xFF10, 0xFF5A}, {0x2000, 0x206F}, {0x2150, 0x218B}, {0x2460, 0x24FF},
      {0x1F300, 0x1F64F}, {0x1F900, 0x1F9FF}, {0x1D400, 0x1D7FF}, {0x10330, 0x1034A}, {0x1, 0x1F},
      {0x3000, 0x3003}, {0xE000, 0xE010}, {0x16A0, 0x16F8}, {0x1680, 0x1680}, {0x200B, 0x200D}};
  std::mt19937 rng(seed);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<std::string> out;
  for (size_t t = 0; t < count; ++t) {
    std::string text;
    const size_t atoms = 1 + pick(t % 50 == 0 ? 400 : 24);
    for (size_t a = 0; a < atoms; ++a) {
      switch (pick(6)) {
        case 0: text += words[pick(words.size())]; break;
        case 1: text += glue[pick(glue.size())]; break;
        case 2: text += spaces[pick(spaces.size())]; break;
        default: {
          const auto& [lo, hi] = ranges[pick(ranges.size())];
          for (size_t k = 1 + pick(4); k > 0; --k) {
            const uint32_t cp = lo + static_cast<uint32_t>(pick(hi - lo + 1));
            if (cp != 0x85) append_utf8(text, cp);
          }
        }
      }
    }
    out.push_back(std::move(text));
  }
  return out;
}

// Runs `node tools/tokenizer/<script> <args...> <in.json> <out.json>` with `input` (the texts, or
// the cases) as in.json and returns out.json parsed, or null after a test failure naming what is
// missing (`hint`).
inline nlohmann::json run_node_reference(const std::string& script, const std::vector<std::string>& args,
                                         const nlohmann::ordered_json& input, const std::string& hint) {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    ADD_FAILURE() << "node is not on PATH" << hint;
    return nullptr;
  }
  TempDir dir;
  const std::string in = dir.write("in.json", input.dump());
  const std::string out = dir.file("out.json"), log = dir.file("node.log");
  std::string command = "node '" + std::string(MT_SOURCE_DIR) + "/tools/tokenizer/" + script + "'";
  for (const std::string& a : args) command += " '" + a + "'";
  command += " '" + in + "' '" + out + "' > '" + log + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << "the JS reference failed: " << command << "\n" << read_all(log) << hint;
    return nullptr;
  }
  return nlohmann::json::parse(read_all(out));
}

}  // namespace mt::test
