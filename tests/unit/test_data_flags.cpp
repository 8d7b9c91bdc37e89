// The data flags at the option level: list-valued options (--data-path W1 P1 W2 P2, --json-keys a
// b) on the command line, in --config YAML and in --print-config output; and `megatron
// preprocess` driven in-process: a run, --merge, and bad command lines failing with one message.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/options.h"
#include "base/error.h"
#include "data/indexed_dataset.h"

namespace mt {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_data_flags_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

TEST(DataFlags, ListOptionsTakeEveryWordUpToTheNextFlag) {
  const Options o = parse_options("train", {"--data-path", "0.3", "a", "0.7", "b", "--split", "98,1,1"});
  EXPECT_EQ(o.list("--data-path"), (std::vector<std::string>{"0.3", "a", "0.7", "b"}));
  EXPECT_EQ(o.text("--split"), "98,1,1");
  EXPECT_EQ(parse_options("train", {"--data-path=x"}).list("--data-path"), std::vector<std::string>{"x"});
  EXPECT_THROW(parse_options("train", {"--data-path"}), Error);
  EXPECT_THROW(parse_options("train", {"--data-path", "--split", "1"}), Error);
  EXPECT_EQ(parse_options("preprocess", {}).list("--json-keys"), std::vector<std::string>{"text"});
  EXPECT_EQ(parse_options("preprocess", {"--json-keys", "text", "title"}).list("--json-keys"),
            (std::vector<std::string>{"text", "title"}));
}

TEST(DataFlags, ListOptionsRoundTripThroughConfigFiles) {
  TempDir dir;
  const Options o = parse_options("train", {"--data-path", "0.3", "a b", "0.7", "c:d"});
  const std::string yaml = o.to_yaml();
  EXPECT_NE(yaml.find("data_path:"), std::string::npos) << yaml;
  std::ofstream(dir / "c.yaml") << yaml;
  const Options back = parse_options("train", {"--config", dir / "c.yaml"});
  EXPECT_EQ(back.list("--data-path"), (std::vector<std::string>{"0.3", "a b", "0.7", "c:d"}));
  std::ofstream(dir / "d.yaml") << "data_path: single\n";
  EXPECT_EQ(parse_options("train", {"--config", dir / "d.yaml"}).list("--data-path"),
            std::vector<std::string>{"single"});
}

TEST(DataFlags, PreprocessCommandRunsMergesAndRejectsBadCommandLines) {
  TempDir dir;
  std::ofstream(dir / "in.jsonl") << "{\"text\": \"1 2 3\"}\n{\"text\": \"4\"}\n";
  testing::internal::CaptureStdout();
  EXPECT_EQ(cmd_preprocess({"--input", dir / "in.jsonl", "--output-prefix", dir / "a", "--vocab-size", "10",
                            "--append-eod", "--workers", "2"}),
            0);
  EXPECT_EQ(cmd_preprocess({"--input", dir / "in.jsonl", "--output-prefix", dir / "b", "--tokenizer-type",
                            "NullTokenizer", "--vocab-size", "10"}),
            0);
  std::filesystem::create_directory(dir / "parts");
  for (const char* p : {"a", "b"})
    for (const char* ext : {".bin", ".idx"})
      std::filesystem::copy_file(dir / (std::string(p) + "_text_document" + ext), dir / "parts/" + p + ext);
  EXPECT_EQ(cmd_preprocess({"--merge", "--input", dir / "parts", "--output-prefix", dir / "merged"}), 0);
  testing::internal::GetCapturedStdout();
  const IndexedDataset a(dir / "a_text_document"), merged(dir / "merged");
  EXPECT_EQ(a.num_tokens(), 6);  // with EOD
  EXPECT_EQ(a.sequence(0), (std::vector<int64_t>{1, 2, 3, 9}));
  EXPECT_EQ(merged.num_documents(), 4);
  EXPECT_EQ(merged.num_tokens(), 6 + 4);

  EXPECT_THROW(cmd_preprocess({"--output-prefix", dir / "c", "--vocab-size", "10"}), Error);  // no --input
  EXPECT_THROW(cmd_preprocess({"--input", dir / "in.jsonl", "--vocab-size", "10"}), Error);   // no --output-prefix
  EXPECT_THROW(cmd_preprocess({"--input", dir / "in.jsonl", "--output-prefix", dir / "c"}), Error);  // no tokenizer
  EXPECT_THROW(cmd_preprocess({"--input", dir / "none*.jsonl", "--output-prefix", dir / "c", "--vocab-size", "10"}),
               Error);
  EXPECT_THROW(cmd_preprocess({"--input", dir / "in.jsonl", "--output-prefix", dir / "c", "--vocab-size", "10",
                               "--workers", "0"}),
               Error);
  EXPECT_THROW(cmd_preprocess({"--input", dir / "in.jsonl", "--output-prefix", dir / "c", "--tokenizer-type",
                               "GPT2BPETokenizer"}),
               Error);  // no vocab/merge files
  EXPECT_THROW(cmd_preprocess({"--merge", "--input", dir / "parts", "--output-prefix", dir / "parts/a"}), Error);
  EXPECT_THROW(cmd_preprocess({"--split", "1"}), Error);  // a train flag
}

}  // namespace
}  // namespace mt
