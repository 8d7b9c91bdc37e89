// Owns tokenizer file reading (see tokenizer_files.h).
#include "data/tokenizer_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace mt {

void check_tokenizer_file(const std::string& path, const char* flag, const std::string& needed_by) {
  MT_CHECK(!path.empty()) << "--tokenizer-type " << needed_by << " needs " << flag;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  MT_CHECK(std::filesystem::exists(status)) << flag << " " << path << ": no such file";
  MT_CHECK(!std::filesystem::is_directory(status)) << flag << " " << path << ": is a directory, not a file";
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in.good()) << flag << " " << path << ": cannot open (" << std::strerror(errno) << ")";
}

std::string read_tokenizer_file(const std::string& path, const char* flag, const std::string& needed_by) {
  check_tokenizer_file(path, flag, needed_by);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  MT_CHECK(!in.bad()) << flag << " " << path << ": read error";
  return std::move(text).str();
}

bool decode_base64(std::string_view text, std::string& bytes) {
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  bytes.clear();
  if (text.size() % 4 != 0) return false;
  while (!text.empty() && text.back() == '=' && text.size() % 4 != 1) text.remove_suffix(1);
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    const int v = value(c);
    if (v < 0) return false;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    if ((count += 6) >= 8) {
      count -= 8;
      bytes.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return true;
}

}  // namespace mt
