// Text fixtures under tests/golden/: one record per line, a key then whitespace-separated fields;
// blank lines and lines starting with '#' are skipped. Written by the scripts in tools/ref/.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mt::test {

struct Record {
  std::string key;
  std::vector<std::string> fields;
  int64_t i(size_t k) const { return std::stoll(fields.at(k)); }
  uint64_t u(size_t k) const { return std::stoull(fields.at(k)); }
};

inline std::vector<Record> load_text_fixture(const std::string& name) {
  const std::string path = std::string(MT_SOURCE_DIR) + "/tests/golden/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path << "; run tools/ref/gpt_dataset_ref.py";
  std::vector<Record> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Record r;
    ss >> r.key;
    for (std::string f; ss >> f;) r.fields.push_back(f);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace mt::test
