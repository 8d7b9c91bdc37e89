// The MMIDIDX v1 writer and reader: byte-identical to files Megatron-LM's IndexedDatasetBuilder
// and tools/merge_datasets.py wrote (tests/golden/data_indexed_*, tools/ref/
// indexed_dataset_megatron_ref.py), Megatron's dtype rule, and a fuzz-style pass mutating and
// truncating both files: every damaged pair must give mt::Error, never a crash or a bad read.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/indexed_dataset.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& name) { return std::string(MT_SOURCE_DIR) + "/tests/golden/" + name; }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_indexed_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

struct Call {
  std::string kind;  // doc, item, end
  std::vector<int32_t> tokens, lengths;
};

// data_indexed_fixture.txt: the builder calls of each named set.
std::map<std::string, std::vector<Call>> load_calls() {
  std::ifstream in(golden("data_indexed_fixture.txt"));
  EXPECT_TRUE(in.good()) << "missing fixture; run tools/ref/indexed_dataset_megatron_ref.py";
  std::map<std::string, std::vector<Call>> sets;
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string kind;
    ss >> kind;
    if (kind == "set") {
      ss >> current;
      continue;
    }
    Call c{kind, {}, {}};
    bool lengths = false;
    for (std::string w; ss >> w;) {
      if (w == "|") lengths = true;
      else (lengths ? c.lengths : c.tokens).push_back(std::stoi(w));
    }
    sets[current].push_back(c);
  }
  return sets;
}

void replay(const std::vector<Call>& calls, const std::string& prefix, TokenDType dtype, int scale = 1) {
  IndexedDatasetBuilder builder(bin_path_of(prefix), dtype);
  for (const Call& c : calls) {
    std::vector<int32_t> tokens = c.tokens;
    if (scale > 1)
      for (int32_t& t : tokens) t = static_cast<int32_t>(static_cast<int64_t>(t) * scale % 70000);
    if (c.kind == "doc") builder.add_document(tokens, c.lengths);
    else if (c.kind == "item") builder.add_item(tokens);
    else builder.end_document();
  }
  builder.finalize(idx_path_of(prefix));
}

void expect_same_files(const std::string& mine, const std::string& megatron) {
  for (const char* ext : {".bin", ".idx"})
    EXPECT_EQ(read_bytes(mine + ext), read_bytes(megatron + ext)) << mine << ext << " differs from Megatron's";
}

TEST(DataIndexedDataset, DtypeRuleIsMegatrons) {
  EXPECT_EQ(optimal_token_dtype(1000), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::int32);
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::uint16);
  EXPECT_EQ(optimal_token_dtype(std::nullopt), TokenDType::int32);
}

TEST(DataIndexedDataset, WriterIsByteIdenticalToMegatron) {
  const auto sets = load_calls();
  ASSERT_EQ(sets.count("first"), 1u);
  TempDir dir;
  replay(sets.at("first"), dir / "u16", TokenDType::uint16);
  expect_same_files(dir / "u16", golden("data_indexed_u16"));
  replay(sets.at("first"), dir / "i32", TokenDType::int32, 67);
  expect_same_files(dir / "i32", golden("data_indexed_i32"));
  // No temporary file is left behind.
  for (const auto& entry : fs::directory_iterator(dir.path))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
}

TEST(DataIndexedDataset, MergeIsByteIdenticalToMegatron) {
  const auto sets = load_calls();
  TempDir dir;
  replay(sets.at("first"), dir / "a", TokenDType::uint16);
  replay(sets.at("second"), dir / "b", TokenDType::uint16);
  merge_indexed_datasets({dir / "a", dir / "b"}, dir / "merged");
  expect_same_files(dir / "merged", golden("data_indexed_merged"));
  // Datasets of different dtypes do not merge.
  replay(sets.at("second"), dir / "c", TokenDType::int32);
  EXPECT_THROW(merge_indexed_datasets({dir / "a", dir / "c"}, dir / "bad"), Error);
}

TEST(DataIndexedDataset, ReaderReadsMegatronsFiles) {
  const auto sets = load_calls();
  for (const auto& [name, scale] : {std::pair<std::string, int>{"u16", 1}, {"i32", 67}}) {
    const IndexedDataset ds(golden("data_indexed_" + name));
    EXPECT_EQ(ds.dtype(), scale == 1 ? TokenDType::uint16 : TokenDType::int32);
    std::vector<std::vector<int64_t>> expected;
    std::vector<int64_t> boundaries = {0};
    for (const Call& c : sets.at("first")) {
      if (c.kind == "end") {
        boundaries.push_back(static_cast<int64_t>(expected.size()));
        continue;
      }
      const std::vector<int32_t> lengths = c.kind == "doc" ? c.lengths : std::vector<int32_t>{int32_t(c.tokens.size())};
      size_t at = 0;
      for (int32_t l : lengths) {
        std::vector<int64_t> seq;
        for (int32_t k = 0; k < l; ++k, ++at) seq.push_back(scale > 1 ? int64_t(c.tokens[at]) * scale % 70000 : c.tokens[at]);
        expected.push_back(seq);
      }
      if (c.kind == "doc") boundaries.push_back(static_cast<int64_t>(expected.size()));
    }
    ASSERT_EQ(ds.num_sequences(), static_cast<int64_t>(expected.size())) << name;
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(ds.sequence(static_cast<int64_t>(i)), expected[i]) << name << " " << i;
    ASSERT_EQ(ds.document_index_size(), static_cast<int64_t>(boundaries.size()));
    for (size_t k = 0; k < boundaries.size(); ++k) EXPECT_EQ(ds.document_index(static_cast<int64_t>(k)), boundaries[k]);
    // Sub-range reads, as GptDataset makes them.
    std::vector<int64_t> part;
    ds.read_tokens(0, 1, 1, part);
    EXPECT_EQ(part, std::vector<int64_t>{expected[0][1]});
    EXPECT_THROW(ds.read_tokens(0, 1, 5, part), Error);
  }
}

TEST(DataIndexedDataset, BuilderRejectsIdsOutsideTheDtypeAndCleansUp) {
  TempDir dir;
  {
    IndexedDatasetBuilder builder(dir / "x.bin", TokenDType::uint16);
    const std::vector<int32_t> too_big = {65536};
    EXPECT_THROW(builder.add_item(too_big), Error);
    const std::vector<int32_t> tokens = {1, 2};
    const std::vector<int32_t> wrong_lengths = {3};
    EXPECT_THROW(builder.add_document(tokens, wrong_lengths), Error);
  }  // destroyed unfinalized
  EXPECT_TRUE(fs::is_empty(dir.path)) << "temporary files left behind";
  EXPECT_FALSE(IndexedDataset::exists(dir / "x"));
}

TEST(DataIndexedDataset, EmptyDatasetRoundTrips) {
  TempDir dir;
  IndexedDatasetBuilder builder(dir / "e.bin", TokenDType::uint16);
  builder.finalize(dir / "e.idx");
  const IndexedDataset ds(dir / "e");
  EXPECT_EQ(ds.num_sequences(), 0);
  EXPECT_EQ(ds.num_documents(), 0);
}

// Opens the pair; on success every sequence must read back in bounds.
bool opens(const std::string& prefix) {
  try {
    const IndexedDataset ds(prefix);
    int64_t total = 0;
    for (int64_t i = 0; i < ds.num_sequences(); ++i) total += static_cast<int64_t>(ds.sequence(i).size());
    EXPECT_EQ(total, ds.num_tokens());
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(prefix), std::string::npos) << "the error should name the file: " << e.what();
    return false;
  }
}

TEST(DataIndexedDataset, DamagedFilesAreClearErrors) {
  TempDir dir;
  const std::string p = dir / "f";
  const std::vector<uint8_t> idx = read_bytes(golden("data_indexed_merged.idx"));
  const std::vector<uint8_t> bin = read_bytes(golden("data_indexed_merged.bin"));
  write_bytes(p + ".idx", idx);
  write_bytes(p + ".bin", bin);
  ASSERT_TRUE(opens(p));

  // Every truncation of either file.
  for (size_t n = 0; n < idx.size(); ++n) {
    write_bytes(p + ".idx", std::vector<uint8_t>(idx.begin(), idx.begin() + static_cast<long>(n)));
    EXPECT_FALSE(opens(p)) << "idx truncated to " << n;
  }
  write_bytes(p + ".idx", idx);
  for (size_t n = 0; n < bin.size(); ++n) {
    write_bytes(p + ".bin", std::vector<uint8_t>(bin.begin(), bin.begin() + static_cast<long>(n)));
    EXPECT_FALSE(opens(p)) << "bin truncated to " << n;
  }
  // Extra bytes after either file's end.
  std::vector<uint8_t> longer = bin;
  longer.push_back(0);
  longer.push_back(0);
  write_bytes(p + ".bin", longer);
  EXPECT_FALSE(opens(p));
  write_bytes(p + ".bin", bin);
  longer = idx;
  longer.push_back(7);
  write_bytes(p + ".idx", longer);
  EXPECT_FALSE(opens(p));

  // Every single-byte mutation of the index (a few values per byte) gives a clear error or a
  // dataset whose every read is in bounds. Mutations of the header, lengths and pointers are
  // all caught (the pointers chain the lengths to the .bin size); a document-index entry can
  // change to another ordered value unnoticed, as Megatron's own reader would not notice either.
  uint64_t n = 0;
  std::memcpy(&n, idx.data() + 18, 8);
  const size_t checked_end = 34 + 12 * n;
  for (size_t at = 0; at < idx.size(); ++at) {
    for (uint8_t v : {uint8_t(0x00), uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      if (idx[at] == v) continue;
      std::vector<uint8_t> m = idx;
      m[at] = v;
      write_bytes(p + ".idx", m);
      const bool ok = opens(p);
      if (at < checked_end) {
        EXPECT_FALSE(ok) << "mutating idx byte " << at << " to " << int(v) << " went unnoticed";
      }
    }
  }
  write_bytes(p + ".idx", idx);

  // The .idx of another dataset next to this .bin.
  write_bytes(p + ".idx", read_bytes(golden("data_indexed_u16.idx")));
  EXPECT_FALSE(opens(p));

  // Missing files.
  EXPECT_THROW(IndexedDataset(dir / "nothing"), Error);
  fs::remove(p + ".bin");
  EXPECT_THROW(IndexedDataset{p}, Error);
}

TEST(DataIndexedDataset, SizeFieldsNearOverflowAreRejected) {
  TempDir dir;
  const std::string p = dir / "o";
  std::vector<uint8_t> idx = read_bytes(golden("data_indexed_u16.idx"));
  write_bytes(p + ".bin", read_bytes(golden("data_indexed_u16.bin")));
  for (uint64_t n : {uint64_t(1) << 62, ~uint64_t(0), uint64_t(0x1555555555555556)}) {
    for (size_t field : {size_t(18), size_t(26)}) {
      std::vector<uint8_t> m = idx;
      std::memcpy(m.data() + field, &n, 8);
      write_bytes(p + ".idx", m);
      EXPECT_FALSE(opens(p)) << "count " << n << " at " << field;
    }
  }
}

}  // namespace
}  // namespace mt
