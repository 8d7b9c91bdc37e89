// Helpers shared by the tokenizer tests: temporary files, printable escapes of byte strings.
#pragma once

#include <gtest/gtest.h>

#include "testing.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace mt::test {

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

}  // namespace mt::test
