// --tokenizer-type HuggingFaceTokenizer through the whole workflow, as a user runs it: `preprocess`
// writes each document as the tokenizer encodes it (the post-processor's BOS, then the text, then
// EOD with --append-eod; an empty document too) in Megatron's .bin/.idx; `train` reads it and
// records the tokenizer in the checkpoint; `generate` with --load alone finds the tokenizer again and
// its generated_text is the tokenizer's decoding of generated_tokens. Uses Mistral's vocabulary
// (third_party/npm/hf_tokenizers, written by scripts/install-deps.sh).
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer_hf.h"
#include "testing.h"

namespace mt {
namespace {

using json = nlohmann::json;

TEST(HfTokenizerWorkflow, PreprocessTrainGenerate) {
  const std::string model = std::string(MT_SOURCE_DIR) + "/third_party/npm/hf_tokenizers/mistral";
  ASSERT_TRUE(std::ifstream(model + "/tokenizer.json").good()) << "missing " << model << "; run scripts/install-deps.sh";
  const HuggingFaceTokenizer tok(model);
  test::TempDir dir;
  std::vector<std::string> texts = {"", "Héllo wörld, 你好 🦙!"};
  for (int i = 0; i < 200; ++i)
    texts.push_back("Document " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog, again.");
  {
    std::ofstream out(dir.file("docs.jsonl"));
    for (const auto& t : texts) out << json{{"text", t}}.dump() << "\n";
  }
  const std::vector<std::string> tokenizer = {"--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", model};
  std::vector<std::string> args = {"--input", dir.file("docs.jsonl"), "--output-prefix", dir.file("data"), "--append-eod",
                                   "--workers", "2"};
  args.insert(args.end(), tokenizer.begin(), tokenizer.end());
  ASSERT_EQ(cmd_preprocess(args), 0);

  const IndexedDataset data(dir.file("data_text_document"));
  ASSERT_EQ(data.num_documents(), static_cast<int64_t>(texts.size()));
  for (size_t d = 0; d < texts.size(); ++d) {
    std::vector<int64_t> expected;
    for (const int32_t id : tok.encode(texts[d])) expected.push_back(id);
    expected.push_back(tok.eod());
    EXPECT_EQ(data.sequence(static_cast<int64_t>(d)), expected) << "document " << d;
  }
  EXPECT_EQ(data.sequence(0), (std::vector<int64_t>{*tok.bos(), tok.eod()}));  // an empty document keeps BOS

  args = {"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
          "--max-position-embeddings", "32", "--micro-batch-size", "4", "--global-batch-size", "4", "--lr", "3e-3",
          "--train-iters", "20", "--log-interval", "10", "--eval-iters", "0", "--data-path", dir.file("data_text_document"),
          "--split", "100,0,0", "--save", dir.file("ckpt"), "--save-interval", "20"};
  args.insert(args.end(), tokenizer.begin(), tokenizer.end());
  ASSERT_EQ(cmd_train(args), 0);

  const std::string out = dir.file("out.jsonl");
  ASSERT_EQ(cmd_generate({"--load", dir.file("ckpt"), "--prompts", "Document 7: the quick", "--num-tokens-to-generate", "8",
                          "--output-path", out}),
            0);
  std::ifstream in(out);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const json result = json::parse(line);
  auto generated = result.at("generated_tokens").get<std::vector<int32_t>>();
  ASSERT_FALSE(generated.empty());
  if (result.at("finish_reason") == "eod") generated.pop_back();
  // The continuation is the text it adds to the prompt's (with its leading space, which Mistral's
  // decoder would drop from the generated ids decoded alone: HfTokenizerIds.DecodeContinuation).
  const std::vector<int32_t> prompt = tok.encode("Document 7: the quick");
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string text = result.at("generated_text").get<std::string>();
  EXPECT_EQ(tok.decode(prompt) + text, tok.decode(all));
}

}  // namespace
}  // namespace mt
