// `megatron generate` as a user runs it: --load alone is enough (the checkpoint carries the model
// and the tokenizer); --output-path writes one JSON line per prompt with its documented fields;
// the same seed gives the same text; --norm-epsilon, --rotary-base and --bf16 on the command line
// replace the checkpoint's (the checkpoint's own value changes nothing, another value changes the
// log-probabilities); a KV-cache cap too small for one sequence is refused by name.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/inference_setup.h"
#include "app/options.h"
#include "train/checkpoint_reader.h"
#include "testing.h"

namespace mt {
namespace {

using json = nlohmann::json;

class GenerateCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    ASSERT_EQ(cmd_train({"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
                         "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu",
                         "--rotary-base", "5000", "--micro-batch-size", "2", "--global-batch-size", "2", "--mock-data",
                         "--tokenizer-type", "NullTokenizer", "--vocab-size", "100", "--lr", "1e-2", "--train-iters", "3",
                         "--log-interval", "10", "--eval-iters", "0", "--save", dir_->file("ckpt")}),
              0);
  }
  static void TearDownTestSuite() { delete dir_; }

  // The output lines of generate with these extra flags.
  static std::vector<json> generate(std::vector<std::string> extra) {
    const std::string out = dir_->file("out_" + std::to_string(runs_++) + ".jsonl");
    std::vector<std::string> args = {"--load", dir_->file("ckpt"), "--prompts", "1 2 3 4", "7 8",
                                     "--num-tokens-to-generate", "6", "--return-log-probs", "--output-path", out};
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(cmd_generate(args), 0);
    std::vector<json> lines;
    std::ifstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    return lines;
  }

  static test::TempDir* dir_;
  static int runs_;
};

test::TempDir* GenerateCommand::dir_ = nullptr;
int GenerateCommand::runs_ = 0;

TEST_F(GenerateCommand, WritesOneLinePerPromptWithItsFields) {
  const std::vector<json> lines = generate({});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].at("prompt"), "1 2 3 4");
  EXPECT_EQ(lines[1].at("prompt"), "7 8");
  for (const json& l : lines) {
    const auto tokens = l.at("generated_tokens").get<std::vector<int32_t>>();
    ASSERT_FALSE(tokens.empty());
    EXPECT_LE(tokens.size(), 6u);
    EXPECT_TRUE(l.at("finish_reason") == "length" || l.at("finish_reason") == "eod");
    // NullTokenizer: the text is the ids (an ending EOD is not text).
    std::vector<int32_t> shown = tokens;
    if (l.at("finish_reason") == "eod") shown.pop_back();
    std::string text;
    for (const int32_t t : shown) text += (text.empty() ? "" : " ") + std::to_string(t);
    EXPECT_EQ(l.at("generated_text"), text);
    const size_t prompt_tokens = l.at("prompt") == "7 8" ? 2 : 4;
    EXPECT_EQ(l.at("logprobs").at("prompt").size(), prompt_tokens - 1);
    EXPECT_EQ(l.at("logprobs").at("generated").size(), tokens.size());
  }
}

TEST_F(GenerateCommand, TheSameSeedGivesTheSameText) {
  const std::vector<std::string> sampled = {"--top_k", "0", "--top_p", "0.9", "--temperature", "1.5", "--seed", "3"};
  EXPECT_EQ(generate(sampled), generate(sampled));
}

TEST_F(GenerateCommand, CommandLineSettingsReplaceTheCheckpoints) {
  const std::vector<json> recorded = generate({});
  EXPECT_EQ(generate({"--rotary-base", "5000"}), recorded);  // the checkpoint's own value
  EXPECT_EQ(generate({"--norm-epsilon", "1e-5"}), recorded);
  for (const std::vector<std::string>& other :
       {std::vector<std::string>{"--rotary-base", "10"}, {"--norm-epsilon", "0.5"}, {"--bf16"}}) {
    const std::vector<json> changed = generate(other);
    ASSERT_EQ(changed.size(), recorded.size());
    EXPECT_NE(changed[0].at("logprobs").at("prompt"), recorded[0].at("logprobs").at("prompt")) << other[0];
  }
}

TEST_F(GenerateCommand, ACacheCapTooSmallForOneSequenceIsRefused) {
  test::expect_error_mentioning(
      [&] {
        cmd_generate({"--load", dir_->file("ckpt"), "--prompts", "1 2", "--inference-dynamic-batching-buffer-size-gb",
                      "1e-9"});
      },
      "holds no sequence");
}

// Megatron's inference launchers pass the layout: it must be the ranks' own.
TEST_F(GenerateCommand, TheLaunchersLayoutFlagsAreCheckedAgainstTheRanks) {
  EXPECT_EQ(generate({"--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size", "1"}).size(), 2u);
  test::expect_error_mentioning(
      [&] { cmd_generate({"--load", dir_->file("ckpt"), "--prompts", "1 2", "--tensor-model-parallel-size", "2"}); },
      "--tensor-model-parallel-size 2 with 1 ranks");
  test::expect_error_mentioning(
      [&] { cmd_generate({"--load", dir_->file("ckpt"), "--prompts", "1 2", "--pipeline-model-parallel-size", "2"}); },
      "pipeline-parallel inference is not implemented");
}

// An MoE checkpoint trained with aux-loss-free balancing: generate routes with the biases training
// left (each MoE layer's decoder.layers.<i>.mlp.router.expert_bias, nonzero after the updates).
TEST(GenerateCommandMoe, LoadsTheRoutersExpertBiases) {
  test::TempDir dir;
  ASSERT_EQ(cmd_train({"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
                       "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear", "--num-experts", "4",
                       "--moe-router-topk", "2", "--moe-router-score-function", "sigmoid",
                       "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "1e-2",
                       "--micro-batch-size", "2", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size",
                       "64", "--lr", "1e-3", "--train-iters", "3", "--log-interval", "10", "--eval-iters", "0",
                       "--save", dir.file("ckpt")}),
            0);
  const Options o = parse_options("generate", {"--load", dir.file("ckpt"), "--prompts", "1 2"});
  std::unique_ptr<InferenceSetup> setup = open_for_inference(o, nullptr);
  setup->load_engine(o, nullptr, 1, 0);
  const auto& biases = setup->engine->expert_biases();
  ASSERT_EQ(biases.size(), 2u);
  for (const auto& [name, bias] : biases) {
    Shape shape;
    const std::vector<float>& saved = setup->checkpoint->whole("buffer", name, bias.shape, shape);
    double largest = 0.0;
    for (int64_t e = 0; e < bias.numel(); ++e) {
      EXPECT_EQ(bias.f32()[e], saved[static_cast<size_t>(e)]) << name << " expert " << e;
      largest = std::max(largest, std::fabs(static_cast<double>(saved[static_cast<size_t>(e)])));
    }
    EXPECT_GT(largest, 0.0) << name << ": training moved the biases";
  }
}

}  // namespace
}  // namespace mt
