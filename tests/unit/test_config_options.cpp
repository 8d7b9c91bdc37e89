// ModelConfig derivation and validation, and the option parser's error messages.
#include <cstdio>
#include <functional>

#include "app/options.h"
#include "model/config.h"
#include "model/list_expression.h"
#include "testing.h"

namespace mt {
namespace {

ModelConfig base() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.seq_length = 64;
  c.vocab_size = 50257;
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, DerivesMegatronDefaults) {
  ModelConfig c = base();
  c.finalize();
  EXPECT_EQ(c.padded_vocab_size(), 50304);
  c.tensor_model_parallel_size = 2;
  EXPECT_EQ(c.padded_vocab_size(), 50432);  // multiple of 128·TP
  EXPECT_EQ(c.kv_channels, 64);
  EXPECT_EQ(c.num_query_groups, 12);
  EXPECT_EQ(c.ffn_hidden_size, 3072);
  EXPECT_EQ(c.max_position_embeddings, 64);
  ModelConfig s = base();
  s.activation = Activation::swiglu;
  s.finalize();
  EXPECT_EQ(s.ffn_hidden_size, 2048);  // int(4·768·2/3 / 64)·64
  EXPECT_EQ(s.fc1_size(), 4096);
}

TEST(ModelConfig, RejectsInconsistentShapesWithClearMessages) {
  ModelConfig c = base();
  c.num_query_groups = 5;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("not divisible by --num-query-groups"), std::string::npos);
  c = base();
  c.hidden_size = 770;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("--kv-channels"), std::string::npos);
  c = base();
  c.max_position_embeddings = 32;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("exceeds --max-position-embeddings"), std::string::npos);
  c = base();
  c.vocab_size = 0;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("--vocab-size"), std::string::npos);
  c = base();
  c.hidden_dropout = 1.0f;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("--hidden-dropout"), std::string::npos);
  c = base();
  EXPECT_NE(error_of([&] {
                c.tensor_model_parallel_size = 5;
                c.finalize();
              }).find("--tensor-model-parallel-size"), std::string::npos);
  c = base();
  c.num_query_groups = -2;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("--num-query-groups must be positive"), std::string::npos);
  c = base();
  c.kv_channels = -8;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("--kv-channels must be positive"), std::string::npos);
  c = base();
  c.position_embedding_type = PositionEmbedding::rope;
  c.max_position_embeddings = 32;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("RoPE tables"), std::string::npos);
  c = base();
  c.recompute_granularity = RecomputeGranularity::selective;
  c.attention_impl = AttentionImpl::unfused;
  EXPECT_NE(error_of([&] { c.finalize(); }).find("drop one of the two"), std::string::npos);
}

// --moe-layer-freq's list arithmetic, as Python evaluates it.
TEST(ListExpression, EvaluatesMegatronsLayerPatterns) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(evaluate_list_expression("[1,0,1]"), (V{1, 0, 1}));
  EXPECT_EQ(evaluate_list_expression("([0]*3+[1]*2)"), (V{0, 0, 0, 1, 1}));
  EXPECT_EQ(evaluate_list_expression("([1]*2+[0]*1)*2"), (V{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(evaluate_list_expression("[0] + 2 * [1]"), (V{0, 1, 1}));
  EXPECT_EQ(evaluate_list_expression("[1]*(1+2)"), (V{1, 1, 1}));
  EXPECT_EQ(evaluate_list_expression("[]"), V{});
  EXPECT_EQ(evaluate_list_expression("[1, 0,]"), (V{1, 0}));
  for (const char* bad : {"[1]*[2]", "[1]+2", "([1]*3", "[1,,]", "[1]*3)", "3", "[1]-[0]", "[1]*x"})
    EXPECT_NE(error_of([&] { evaluate_list_expression(bad); }).find("list"), std::string::npos) << bad;
}

TEST(ModelConfig, MoeLayerFreqTakesMegatronsListExpressions) {
  ModelConfig c = base();
  c.num_layers = 4;
  c.moe.num_experts = 4;
  c.add_bias_linear = false;
  c.moe.layer_freq = "([0]*1+[1]*3)";
  c.finalize();
  EXPECT_EQ(c.moe.layer_is_moe, (std::vector<uint8_t>{0, 1, 1, 1}));
  c.moe.layer_freq = "([0]*1+[1]*2)";
  EXPECT_NE(error_of([&] { c.finalize(); }).find("lists 3 layers but --num-layers is 4"), std::string::npos);
  c.moe.layer_freq = "[0]*1+[2]*3";
  EXPECT_NE(error_of([&] { c.finalize(); }).find("every entry must be 0 or 1"), std::string::npos);
}

TEST(Options, ParsesTypedValuesAndDefaults) {
  const Options o = parse_options("train", {"--hidden-size", "256", "--lr=3e-4", "--swiglu", "--normalization",
                                            "RMSNorm"});
  EXPECT_EQ(o.integer("--hidden-size"), 256);
  EXPECT_DOUBLE_EQ(o.real("--lr"), 3e-4);
  EXPECT_TRUE(o.flag("--swiglu"));
  EXPECT_FALSE(o.flag("--disable-bias-linear"));
  EXPECT_EQ(o.text("--normalization"), "RMSNorm");
  EXPECT_EQ(o.integer("--num-layers"), 2);  // default
  EXPECT_FALSE(o.has("--ffn-hidden-size"));  // no default, not given
}

TEST(Options, RejectsBadInputWithOneClearMessage) {
  EXPECT_NE(error_of([] { parse_options("train", {"--hiden-size", "4"}); }).find("did you mean --hidden-size"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_options("train", {"--hidden-size", "big"}); }).find("expects an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_options("train", {"--lr"}); }).find("needs a value"), std::string::npos);
  EXPECT_NE(error_of([] { parse_options("train", {"--normalization", "BatchNorm"}); }).find("must be one of"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_options("train", {"--swiglu=1"}); }).find("takes no value"), std::string::npos);
  // As argparse: the last value wins, with a note.
  const Options twice = parse_options("train", {"--seed", "1", "--seed", "2", "--data-path", "a", "--data-path", "b", "c"});
  EXPECT_EQ(twice.integer("--seed"), 2);
  EXPECT_EQ(twice.list("--data-path"), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(twice.repeat_notes(), (std::vector<std::string>{"--seed ('1', then '2')", "--data-path ('a', then 'b c')"}));
  EXPECT_NE(twice.megatron_notes_line().find("Given twice, the last value used (as argparse): --seed ('1', then '2')"),
            std::string::npos);
  // As in Megatron's parser, a repeat with the same value is harmless (its scripts repeat flags).
  EXPECT_EQ(parse_options("train", {"--seed", "1", "--seed", "1", "--bf16", "--bf16"}).integer("--seed"), 1);
  EXPECT_NE(error_of([] { parse_options("train", {"stray"}); }).find("unexpected argument"), std::string::npos);
}

TEST(Options, HelpListsEveryTrainOption) {
  const std::string help = options_help("train");
  for (const OptionSpec& o : option_table())
    if ((std::string(",") + o.commands + ",").find(",train,") != std::string::npos) {
      EXPECT_NE(help.find(o.name), std::string::npos) << o.name;
    }
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

std::string write_temp(const char* name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(Options, ConfigFileSitsBetweenDefaultsAndFlags) {
  const std::string path = write_temp("cfg.yaml", "hidden_size: 96\nnum-layers: 3\nswiglu: true\nlr: 2.0e-4\n");
  const Options o = parse_options("train", {"--config", path, "--num-layers", "5"});
  EXPECT_EQ(o.integer("--hidden-size"), 96);
  EXPECT_EQ(o.integer("--num-layers"), 5);  // the flag wins
  EXPECT_TRUE(o.flag("--swiglu"));
  EXPECT_DOUBLE_EQ(o.real("--lr"), 2e-4);
}

TEST(Options, PrintedConfigReadsBack) {
  const Options a = parse_options("train", {"--hidden-size", "80", "--openai-gelu", "--vocab-size", "300"});
  const std::string path = write_temp("printed.yaml", a.to_yaml());
  const Options b = parse_options("train", {"--config", path});
  EXPECT_EQ(b.to_yaml(), a.to_yaml());
  EXPECT_TRUE(b.flag("--openai-gelu"));
}

TEST(Options, BadConfigFilesFailWithTheFileNamed) {
  EXPECT_NE(error_of([] { parse_options("train", {"--config", "/nonexistent/x.yaml"}); }).find("cannot read"),
            std::string::npos);
  const std::string unknown = write_temp("unknown.yaml", "hiden_size: 3\n");
  EXPECT_NE(error_of([&] { parse_options("train", {"--config", unknown}); }).find("did you mean --hidden-size"),
            std::string::npos);
  const std::string typed = write_temp("typed.yaml", "hidden_size: wide\n");
  EXPECT_NE(error_of([&] { parse_options("train", {"--config", typed}); }).find("expects an integer"),
            std::string::npos);
  const std::string list = write_temp("list.yaml", "- 1\n- 2\n");
  EXPECT_NE(error_of([&] { parse_options("train", {"--config", list}); }).find("expected a mapping"),
            std::string::npos);
  const std::string broken = write_temp("broken.yaml", "a: [1, 2\n");
  EXPECT_NE(error_of([&] { parse_options("train", {"--config", broken}); }).find("not valid YAML"),
            std::string::npos);
  const std::string flag = write_temp("flag.yaml", "swiglu: maybe\n");
  EXPECT_NE(error_of([&] { parse_options("train", {"--config", flag}); }).find("use true or false"),
            std::string::npos);
}

}  // namespace
}  // namespace mt
