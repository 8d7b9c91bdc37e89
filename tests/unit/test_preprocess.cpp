// `megatron preprocess` (data/preprocess.h): output byte-identical to Megatron-LM's
// tools/preprocess_data.py (fixtures from tools/ref/indexed_dataset_megatron_ref.py, NullTokenizer)
// for any worker count and batch size, several input files read in sorted order, and bad input
// (malformed JSON, missing key, wrong value type) as errors naming file and line, with no output
// left behind.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

std::string golden(const std::string& name) { return std::string(MT_SOURCE_DIR) + "/tests/golden/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_preprocess_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

std::function<std::unique_ptr<Tokenizer>()> null_tokenizer(int64_t vocab) {
  return [vocab] {
    TokenizerOptions t;
    t.type = "NullTokenizer";
    t.vocab_size = vocab;
    return make_tokenizer(t);
  };
}

PreprocessOptions options(const std::string& input, const std::string& prefix) {
  PreprocessOptions p;
  p.input = input;
  p.output_prefix = prefix;
  p.json_keys = {"text", "title"};
  p.append_eod = true;
  return p;
}

TEST(Preprocess, ByteIdenticalToMegatronForAnyWorkerCount) {
  TempDir dir;
  for (const auto& [name, vocab] : {std::pair<std::string, int64_t>{"u16", 1000}, {"i32", 70000}}) {
    for (int64_t workers : {1, 2, 3}) {
      for (int64_t batch : {1, 2, 256}) {
        PreprocessOptions p = options(golden("data_preprocess_input.jsonl"), dir / name);
        p.workers = workers;
        p.batch_lines = batch;
        const PreprocessResult r = preprocess_json_lines(p, null_tokenizer(vocab));
        EXPECT_EQ(r.totals.documents, 6);
        ASSERT_EQ(r.output_prefixes.size(), 2u);
        for (const std::string key : {"text", "title"}) {
          for (const std::string ext : {".bin", ".idx"}) {
            const std::string mine = dir / (name + "_" + key + "_document" + ext);
            EXPECT_EQ(slurp(mine), slurp(golden("data_preprocess_" + name + "_" + key + "_document" + ext)))
                << mine << " differs from Megatron's (workers " << workers << ", batch " << batch << ")";
          }
        }
      }
    }
  }
}

TEST(Preprocess, GlobReadsFilesInSortedOrder) {
  TempDir dir;
  // The fixture's lines split over two files, named so that sorting restores the order.
  std::ifstream in(golden("data_preprocess_input.jsonl"));
  std::string line, first, second;
  for (int i = 0; std::getline(in, line); ++i) (i < 4 ? first : second) += line + "\n";
  spit(dir / "part_b.jsonl", second + "\n");  // a trailing blank line is skipped
  spit(dir / "part_a.jsonl", first);
  PreprocessOptions p = options(dir / "part_*.jsonl", dir / "out");
  p.workers = 2;
  p.batch_lines = 3;
  EXPECT_EQ(preprocess_json_lines(p, null_tokenizer(1000)).totals.documents, 6);
  EXPECT_EQ(slurp(dir / "out_text_document.bin"), slurp(golden("data_preprocess_u16_text_document.bin")));
  EXPECT_EQ(slurp(dir / "out_text_document.idx"), slurp(golden("data_preprocess_u16_text_document.idx")));
  EXPECT_THROW(expand_input_glob(dir / "nothing*.jsonl"), Error);
}

// Runs preprocess on `text` and returns the error message ("" if it succeeded).
std::string error_of(const std::string& text, int64_t workers = 2) {
  TempDir dir;
  spit(dir / "in.jsonl", text);
  PreprocessOptions p = options(dir / "in.jsonl", dir / "out");
  p.workers = workers;
  p.batch_lines = 2;
  std::string message;
  try {
    preprocess_json_lines(p, null_tokenizer(1000));
  } catch (const Error& e) {
    message = e.what();
    // Nothing that looks like a dataset, and no temporary file, is left.
    EXPECT_TRUE(fs::is_empty(dir.path) || std::distance(fs::directory_iterator(dir.path), {}) == 1)
        << "output left behind after an error";
  }
  return message;
}

TEST(Preprocess, BadInputNamesFileAndLine) {
  const std::string ok = "{\"text\": \"1 2\", \"title\": \"3\"}\n";
  std::string m = error_of(ok + ok + ok + "{\"text\": \"1\", \"title\": \n" + ok);
  EXPECT_NE(m.find("in.jsonl:4"), std::string::npos) << m;
  EXPECT_NE(m.find("not a valid JSON line"), std::string::npos) << m;
  m = error_of(ok + "{\"text\": \"1\"}\n");
  EXPECT_NE(m.find("in.jsonl:2"), std::string::npos) << m;
  EXPECT_NE(m.find("no key \"title\""), std::string::npos) << m;
  m = error_of(ok + "{\"text\": 5, \"title\": \"1\"}\n");
  EXPECT_NE(m.find("in.jsonl:2"), std::string::npos) << m;
  EXPECT_NE(m.find("string or a list of strings"), std::string::npos) << m;
  m = error_of("[1, 2]\n");
  EXPECT_NE(m.find("in.jsonl:1"), std::string::npos) << m;
  m = error_of(ok + ok + "{\"text\": \"1 zz\", \"title\": \"1\"}\n", 1);
  EXPECT_NE(m.find("in.jsonl:3"), std::string::npos) << m;
  // The first bad line in input order is the one reported, whatever the worker count.
  for (int64_t workers : {1, 3}) {
    m = error_of(ok + "{\"text\": 1, \"title\": \"1\"}\n" + ok + ok + "{bad\n", workers);
    EXPECT_NE(m.find("in.jsonl:2"), std::string::npos) << m;
  }
  EXPECT_EQ(error_of(ok + "\n  \n" + ok), "");
}

TEST(Preprocess, MergeListsPrefixesOfADirectory) {
  TempDir dir;
  fs::create_directory(dir / "parts");
  for (const char* name : {"b", "a"})
    for (const char* ext : {".bin", ".idx"})
      fs::copy_file(golden(std::string("data_indexed_u16") + ext), dir / "parts/" + name + ext);
  const std::vector<std::string> prefixes = list_dataset_prefixes(dir / "parts");
  EXPECT_EQ(prefixes, (std::vector<std::string>{dir / "parts/a", dir / "parts/b"}));
  EXPECT_EQ(list_dataset_prefixes(dir / "parts/*.idx"), prefixes);
  fs::remove(dir / "parts/b.bin");
  EXPECT_THROW(list_dataset_prefixes(dir / "parts"), Error);
}

}  // namespace
}  // namespace mt
