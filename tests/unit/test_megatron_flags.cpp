// Megatron-LM's command lines: every flag of its training parser (pinned in
// app/megatron_arguments.inc) is implemented, accepted without effect or refused by name; none is
// ever unknown, and docs/megatron-flags.md lists them as the binary does.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "app/megatron_flags.h"
#include "app/options.h"
#include "app/tokenizer_flags.h"
#include "app/train_flags.h"
#include "base/error.h"
#include "testing.h"

namespace mt {
namespace {

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse_options("train", args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MegatronFlags, EveryMegatronFlagIsClassified) {
  ASSERT_GT(megatron_arguments().size(), 800u);
  for (const MegatronArgument& a : megatron_arguments())
    EXPECT_TRUE(implemented_for_train(a.name) || megatron_flag_status(a.name) != nullptr)
        << a.name << " is neither implemented nor classified in app/megatron_flags.cpp";
}

TEST(MegatronFlags, EveryRuleClassifiesAFlagThatIsNotImplemented) {
  // A flag implemented later, or gone from Megatron, must leave the table of accepted and missing ones.
  for (const std::string& pattern : megatron_flag_patterns()) {
    int used = 0;
    for (const MegatronArgument& a : megatron_arguments())
      used += matches_flag_pattern(pattern, a.name) && !implemented_for_train(a.name);
    EXPECT_GT(used, 0) << pattern << " classifies no Megatron flag that train lacks";
  }
}

TEST(MegatronFlags, AcceptedFlagsTakeTheirValuesAndAreNoted) {
  const Options o = parse_options("train", {"--use-mcore-models", "--transformer-impl", "transformer_engine",
                                            "--hidden-size", "64", "--high-priority-stream-groups", "dp", "ep",
                                            "--distributed-backend=nccl", "--tensorboard-dir", "tb",
                                            "--num-layers", "3"});
  EXPECT_EQ(o.integer("--hidden-size"), 64);
  EXPECT_EQ(o.integer("--num-layers"), 3);
  ASSERT_EQ(o.megatron_notes().size(), 5u);
  EXPECT_EQ(o.megatron_notes()[0].given, "--use-mcore-models");
  EXPECT_EQ(o.megatron_notes()[1].given, "--transformer-impl transformer_engine");
  EXPECT_EQ(o.megatron_notes()[2].given, "--high-priority-stream-groups dp ...");  // a list flag: every value taken
  EXPECT_EQ(o.megatron_notes()[3].given, "--distributed-backend nccl");
  const std::string line = o.megatron_notes_line();
  EXPECT_EQ(line.rfind("Megatron-LM flags accepted without effect: --use-mcore-models (", 0), 0u) << line;
  EXPECT_NE(line.find("--tensorboard-dir tb (TensorBoard"), std::string::npos) << line;
}

TEST(MegatronFlags, MissingFeaturesAreRefusedByName) {
  EXPECT_NE(error_of({"--fp8-format", "hybrid"}).find("--fp8-format is not implemented in megatron.cpp: FP8"),
            std::string::npos);
  EXPECT_NE(error_of({"--multi-latent-attention"}).find("not implemented in megatron.cpp: DeepSeek-V3"),
            std::string::npos);
  // Megatron's default value of a missing feature changes nothing, so it is accepted.
  EXPECT_EQ(error_of({"--context-parallel-size", "1"}), "");
  EXPECT_NE(error_of({"--hierarchical-context-parallel-sizes", "2", "2"}).find("context parallelism (planned)"),
            std::string::npos);
  EXPECT_EQ(error_of({"--rope-scaling-factor", "8.0"}), "");
  EXPECT_NE(error_of({"--rope-scaling-factor", "4"}).find("Llama 3.1 RoPE scaling"), std::string::npos);
  EXPECT_EQ(error_of({"--optimizer", "adam"}), "");
  EXPECT_EQ(error_of({"--optimizer", "muon"}), "");
  EXPECT_NE(error_of({"--optimizer", "sgd"}).find("the SGD optimizer"), std::string::npos);
  EXPECT_NE(error_of({"--muon-scalar-optimizer", "lion"}).find("the Lion optimizer"), std::string::npos);
  // A value Megatron has but megatron.cpp lacks, for a flag it implements.
  EXPECT_NE(error_of({"--position-embedding-type", "yarn"}).find("yarn is not implemented in megatron.cpp"),
            std::string::npos);
  // Megatron's choices are still checked.
  EXPECT_NE(error_of({"--transformer-impl", "cudnn"}).find("must be one of"), std::string::npos);
}

// A Megatron choice value the option table lacks is refused naming its feature, planned or not.
TEST(MegatronFlags, EveryMegatronChoiceValueIsImplementedOrClassified) {
  const auto has = [](const std::string& choices, const std::string& v) {
    return ("|" + choices + "|").find("|" + v + "|") != std::string::npos;
  };
  for (const OptionSpec& o : option_table()) {
    const MegatronArgument* m = find_megatron_argument(o.name);
    if (o.type != OptionType::choice || !m || !*m->choices) continue;
    std::stringstream values(m->choices);
    for (std::string v; std::getline(values, v, '|');)
      EXPECT_TRUE(has(o.choices, v) || megatron_value_status(o.name, v)) << o.name << " " << v << " is unclassified";
  }
  for (const auto& [name, value] : megatron_value_rules()) {
    const MegatronArgument* m = find_megatron_argument(name);
    ASSERT_NE(m, nullptr) << name;
    EXPECT_TRUE(has(m->choices, value)) << name << " " << value << " is not Megatron's";
    EXPECT_NE(error_of({name, value}), "") << name << " " << value << " is implemented: drop its rule";
  }
  EXPECT_NE(error_of({"--tokenizer-type", "SFTTokenizer"}).find("is not implemented in megatron.cpp (implemented: "),
            std::string::npos);
  EXPECT_NE(error_of({"--tokenizer-type", "SFTTokenizer"}).find(": supervised fine-tuning on chat data (planned)"),
            std::string::npos);
  EXPECT_NE(error_of({"--position-embedding-type", "mrope"}).find(": multimodal RoPE"), std::string::npos);
  // Megatron's rope type for ordinary attention is what megatron.cpp does; YaRN is planned.
  EXPECT_EQ(error_of({"--rope-type", "rope"}), "");
  EXPECT_NE(error_of({"--rope-type", "yarn"}).find("(planned)"), std::string::npos);
}

// Flags Megatron accepts in combinations where they change nothing are accepted, each with a note.
TEST(MegatronFlags, InertCombinationsAreAcceptedWithANote) {
  const auto notes_of = [](const std::vector<std::string>& args) {
    const Options o = parse_options("train", args);
    return inert_flag_notes(o, model_config(o));
  };
  const std::vector<std::string> moe = {"--num-experts", "4", "--moe-router-topk", "2"};
  std::vector<std::string> sigmoid = moe;
  sigmoid.insert(sigmoid.end(), {"--moe-router-score-function", "sigmoid", "--moe-router-pre-softmax"});
  EXPECT_FALSE(model_config(parse_options("train", sigmoid)).moe.router.pre_softmax);
  ASSERT_EQ(notes_of(sigmoid).size(), 1u);
  EXPECT_NE(notes_of(sigmoid)[0].find("--moe-router-pre-softmax has no effect"), std::string::npos);
  EXPECT_EQ(model_config(parse_options("train", {"--expert-tensor-parallel-size", "2"})).moe.num_experts, 0);
  EXPECT_EQ(notes_of({"--expert-tensor-parallel-size", "2"}).size(), 1u);
  EXPECT_THROW(model_config(parse_options("train", {"--expert-model-parallel-size", "2"})), Error);
  std::vector<std::string> flex = moe;
  flex.insert(flex.end(), {"--moe-token-dispatcher-type", "flex"});
  EXPECT_EQ(model_config(parse_options("train", flex)).moe.dispatcher, MoeDispatcher::alltoall);
  EXPECT_EQ(notes_of(flex).size(), 1u);
  const std::vector<std::string> unfused = {"--attention-backend", "unfused", "--recompute-activations"};
  EXPECT_EQ(model_config(parse_options("train", unfused)).attention_impl, AttentionImpl::flash);
  EXPECT_EQ(notes_of(unfused).size(), 1u);
  EXPECT_EQ(model_config(parse_options("train", {"--attention-backend", "unfused"})).attention_impl,
            AttentionImpl::unfused);
  EXPECT_TRUE(notes_of({"--attention-backend", "unfused"}).empty());
  // Megatron saves only with --save: an interval alone saves nothing.
  ASSERT_EQ(notes_of({"--save-interval", "5"}).size(), 1u);
  EXPECT_NE(notes_of({"--save-interval", "5"})[0].find("nothing is saved"), std::string::npos);
  EXPECT_TRUE(notes_of({"--save-interval", "5", "--save", "ckpt"}).empty());
  EXPECT_EQ(notes_of({"--optimizer", "dist_muon"}).size(), 1u);
}

// The SC21 paper's scripts under Megatron-LM's examples/ still pass flags its parser dropped.
TEST(MegatronFlags, OldFlagsAreReadAsTheirCurrentNames) {
  const Options o = parse_options("train", {"--activations-checkpoint-method", "block", "--DDP-impl", "local",
                                            "--activations-checkpoint-num-layers=2", "--hidden-size", "64"});
  EXPECT_EQ(o.text("--recompute-granularity"), "full");
  EXPECT_EQ(o.text("--recompute-method"), "block");
  EXPECT_EQ(o.integer("--recompute-num-layers"), 2);
  EXPECT_EQ(o.integer("--hidden-size"), 64);
  const std::string line = o.megatron_notes_line();
  EXPECT_NE(line.find("Megatron-LM's old flags read as today's: --activations-checkpoint-method block as "
                      "--recompute-granularity full --recompute-method block ("),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("--DDP-impl local (no effect: "), std::string::npos) << line;
  const Options old = parse_options("train", {"--checkpoint-activations"});
  EXPECT_EQ(old.text("--recompute-method"), "uniform");
  // The values are still checked, and the old name cannot contradict the new one.
  EXPECT_NE(error_of({"--DDP-impl", "fsdp"}).find("--DDP-impl must be one of local|torch"), std::string::npos);
  EXPECT_NE(error_of({"--activations-checkpoint-method", "all"}).find("--recompute-method must be one of"),
            std::string::npos);
  // The old name and the new one given differently: the last wins, as argparse's last value does.
  EXPECT_EQ(parse_options("train", {"--activations-checkpoint-method", "uniform", "--recompute-method", "block"})
                .text("--recompute-method"),
            "block");
  EXPECT_NE(error_of({"--activations-checkpoint-method"}).find("needs a value"), std::string::npos);
  // --moe-layer-recompute: selective recomputation with moe added to the modules (core_attn stays).
  const std::vector<std::string> moe = {"--num-experts", "4", "--disable-bias-linear", "--moe-layer-recompute"};
  const ModelConfig layer_recompute = model_config(parse_options("train", moe));
  EXPECT_EQ(layer_recompute.recompute_granularity, RecomputeGranularity::selective);
  EXPECT_TRUE(layer_recompute.recompute_moe && layer_recompute.recompute_core_attn);
  std::vector<std::string> with_mlp = moe;
  with_mlp.insert(with_mlp.end(), {"--recompute-granularity", "selective", "--recompute-modules", "mlp"});
  const ModelConfig both = model_config(parse_options("train", with_mlp));
  EXPECT_TRUE(both.recompute_moe && both.recompute_mlp && !both.recompute_core_attn);
  try {
    model_config(parse_options("train", {"--moe-layer-recompute", "--recompute-granularity", "full",
                                         "--recompute-method", "uniform"}));
    ADD_FAILURE() << "--moe-layer-recompute with full recomputation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("contradicts --recompute-granularity full"), std::string::npos) << e.what();
  }
}

TEST(MegatronFlags, TyposAreUnknownWithTheNearestName) {
  const std::string e = error_of({"--use-mcore-model"});
  EXPECT_NE(e.find("unknown option --use-mcore-model"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean --use-mcore-models?"), std::string::npos) << e;
  // Other commands keep their own tables: Megatron's training flags are unknown there.
  EXPECT_THROW(parse_options("preprocess", {"--use-mcore-models"}), Error);
}

TEST(MegatronFlags, AttentionBackendTakesMegatronsValues) {
  for (const char* v : {"flash", "fused", "auto", "unfused", "local"})
    EXPECT_EQ(error_of({"--attention-backend", v}), "") << v;
}

// Megatron's scripts name GPT-2's vocabulary and merges without --tokenizer-type.
TEST(MegatronFlags, GptFilesAloneMeanTheGpt2Tokenizer) {
  EXPECT_EQ(tokenizer_options(parse_options("train", {"--vocab-file", "v.json", "--merge-file", "m.txt"})).type,
            "GPT2BPETokenizer");
  EXPECT_EQ(tokenizer_options(parse_options("train", {"--vocab-size", "64"})).type, "NullTokenizer");
  EXPECT_THROW(tokenizer_options(parse_options("train", {"--vocab-file", "v.json"})), Error);
}

TEST(MegatronFlags, DocumentListsEveryFlagAsTheBinaryDoes) {
  std::ifstream in(std::string(MT_SOURCE_DIR) + "/docs/megatron-flags.md");
  ASSERT_TRUE(in) << "docs/megatron-flags.md is missing";
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string report = megatron_flags_report(true, implemented_for_train);
  EXPECT_NE(doc.str().find(report), std::string::npos)
      << "docs/megatron-flags.md is out of date: regenerate its list with `megatron flags --markdown`";
  EXPECT_EQ(report.find("unclassified"), std::string::npos);
}

}  // namespace
}  // namespace mt
