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

}  // namespace mt
