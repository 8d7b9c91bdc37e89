// `megatron convert`: Hugging Face import checked against an independent reference (the fixtures
// of tools/ref/hf_ref.py: random GPT-2, Llama, Mixtral, Qwen3 and Qwen3-MoE weights and the logits its
// float64 forward computes), export checked as import's exact inverse, a trained model through
// HF and back with the same bits and loss, offline resharding that resumes like the original,
// and refusals of what cannot be converted.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "app/commands.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/safetensors.h"
#include "model/gpt.h"
#include "model/hf_format.h"
#include "testing.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_convert.h"
#include "train/checkpoint_reader.h"
#include "train/trainer.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(MT_SOURCE_DIR) + "/tests/golden/";

void convert(const std::string& loader, const std::string& saver, const std::string& from, const std::string& to,
             int tp = 1, int pp = 1) {
  ConvertOptions o;
  o.loader = loader;
  o.saver = saver;
  o.load_dir = from;
  o.save_dir = to;
  o.target_tp = tp;
  o.target_pp = pp;
  convert_checkpoint(o);
}

// The model a checkpoint holds, ready to run sequences of length s without dropout.
ModelConfig checkpoint_model(const CheckpointReader& reader, int64_t s) {
  ModelConfig c;
  apply_model_record(reader.manifest().model, reader.dir(), c);
  c.seq_length = s;
  c.hidden_dropout = c.attention_dropout = 0.0f;
  c.finalize();
  return c;
}

void expect_same_tensors(const std::string& a_path, const std::string& b_path) {
  const SafetensorsFile a = SafetensorsFile::load(a_path), b = SafetensorsFile::load(b_path);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const TensorView x = a.get(name), y = b.get(name);
    ASSERT_EQ(x.dtype, y.dtype) << name;
    ASSERT_EQ(x.shape, y.shape) << name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.bytes()), 0) << name << " differs";
  }
}

class HfFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(HfFixture, ImportMatchesTheReferenceLogitsAndExportGivesTheFileBack) {
  const std::string name = GetParam(), hf = kGolden + "hf_" + name;
  test::TempDir dir;
  convert("hf", "megatron", hf, dir.file("megatron"));
  CheckpointReader reader(dir.file("megatron"), std::nullopt);
  EXPECT_EQ(reader.manifest().iteration, 0);
  EXPECT_FALSE(reader.manifest().optimizer_saved);

  const SafetensorsFile ref = SafetensorsFile::load(kGolden + "hf_" + name + "_reference.safetensors");
  const TensorView tokens = ref.get("tokens"), logits = ref.get("logits");
  const int64_t b = tokens.dim(0), s = tokens.dim(1), v = logits.dim(2);
  const ModelConfig c = checkpoint_model(reader, s);
  ASSERT_EQ(c.vocab_size, v);
  ASSERT_GT(c.padded_vocab_size(), v);  // the padding rows are ours alone
  MemoryTracker memory;
  GptModelOptions options;
  options.head_chunk_tokens = b * s;
  GptModel model(c, b, cpu_backend(), &memory, options);
  for (ParamStore* store : model.stage().param_stores()) reader.read_weights(store->params());  // experts too
  model.forward(MicroBatch{tokens, tokens, TensorView()}, {});
  const TensorView ours = model.last_logits_chunk();  // [s, b, padded vocab]
  double worst = 0.0, largest = 0.0;
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < v; ++k) {
        const double want = logits.f32()[(j * s + i) * v + k];
        worst = std::max(worst, std::fabs(ours.f32()[(i * b + j) * c.padded_vocab_size() + k] - want));
        largest = std::max(largest, std::fabs(want));
      }
  std::printf("[hf_%s] logits max |diff| %.3e against the reference loader (max |logit| %.3f)\n", name.c_str(), worst,
              largest);
  EXPECT_LE(worst, 1e-5);

  convert("megatron", "hf", dir.file("megatron"), dir.file("hf"));
  expect_same_tensors(hf + "/model.safetensors", dir.file("hf") + "/model.safetensors");
  const std::string config_path = dir.file("hf") + "/config.json";
  ModelConfig exported = model_config_from_hf(read_json_file(config_path), config_path);
  ModelConfig original = model_config_from_hf(read_json_file(hf + "/config.json"), hf);
  exported.finalize();
  original.finalize();
  EXPECT_EQ(model_record(exported), model_record(original));
  // Every key both write says the same (a misspelt key would read back as its default above).
  const nlohmann::json written = read_json_file(config_path), theirs = read_json_file(hf + "/config.json");
  int common = 0;
  for (auto it = written.begin(); it != written.end(); ++it) {
    // Training settings a checkpoint's model record does not keep: dropout, the router's loss.
    const bool training = it.key().find("pdrop") != std::string::npos || it.key().find("dropout") != std::string::npos ||
                          it.key() == "router_aux_loss_coef";
    if (!theirs.contains(it.key()) || training) continue;
    ++common;
    EXPECT_EQ(it.value(), theirs.at(it.key())) << it.key();
  }
  EXPECT_GE(common, 12);
}

INSTANTIATE_TEST_SUITE_P(Convert, HfFixture, ::testing::Values("gpt2", "llama", "mixtral", "qwen3", "qwen3_moe"));

// Tiny GPT-2 and Llama (GQA, untied, bf16) models in the shapes train builds.
ModelConfig gpt2_style() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 300;  // padded to 384 at tp 1, 512 at tp 2
  m.activation = Activation::gelu_tanh;
  return m;
}

ModelConfig llama_style() {
  ModelConfig m = gpt2_style();
  m.num_query_groups = 2;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbedding::rope;
  m.activation = Activation::swiglu;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = true;
  m.rotary_base = 50000.0;
  m.norm_epsilon = 1e-6f;
  m.params_dtype = DType::bf16;
  return m;
}

// Without vocabulary padding (a multiple of 128): the round trip then keeps the whole function.
// Settings away from Hugging Face's defaults, so a key the export misspells reads back wrong.
ModelConfig gpt2_untied_exact_gelu() {
  ModelConfig m = gpt2_style();
  m.vocab_size = 256;
  m.untie_embeddings_and_output_weights = true;
  m.activation = Activation::gelu;
  m.norm_epsilon = 3e-5f;
  return m;
}

ModelConfig llama_tied_biased_narrow_heads() {
  ModelConfig m = llama_style();
  m.vocab_size = 256;
  m.untie_embeddings_and_output_weights = false;
  m.add_bias_linear = true;
  m.kv_channels = 8;  // head_dim != hidden / heads
  m.norm_epsilon = 2e-5f;
  return m;
}

// MixtralForCausalLM: every MLP 4 SwiGLU experts, top-2 (the dense width set to the experts', as
// the export writes it as intermediate_size).
ModelConfig mixtral_style() {
  ModelConfig m = llama_style();
  m.vocab_size = 256;
  m.ffn_hidden_size = 40;
  m.moe.num_experts = 4;
  m.moe.ffn_hidden_size = 40;
  return m;
}

// Qwen3ForCausalLM: query and key norms, tied, head_dim != hidden / heads, RoPE base 1e6.
ModelConfig qwen3_style() {
  ModelConfig m = llama_style();
  m.vocab_size = 256;
  m.qk_layernorm = true;
  m.untie_embeddings_and_output_weights = false;
  m.kv_channels = 24;
  m.rotary_base = 1e6;
  return m;
}

// Qwen3MoeForCausalLM with norm_topk_prob false (--moe-router-pre-softmax), its dense width apart
// from the experts'.
ModelConfig qwen3_moe_style() {
  ModelConfig m = mixtral_style();
  m.qk_layernorm = true;
  m.ffn_hidden_size = 64;
  m.moe.ffn_hidden_size = 24;
  m.moe.router.pre_softmax = true;
  m.moe.aux_loss_coeff = 1e-3;
  return m;
}

TrainConfig short_run(const ModelConfig& m, const std::string& save, int64_t iterations) {
  TrainConfig t;
  t.loss_scale.bf16 = m.params_dtype == DType::bf16;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = iterations;
  t.log_interval = 100;
  t.eval_iters = 0;
  t.seed = 11;
  t.schedule.lr = 2e-3;
  t.checkpoint.save = save;
  return t;
}

std::vector<float> losses_finetuned_from(const ModelConfig& m, const std::string& dir) {
  TrainConfig run = short_run(m, "", 3);
  run.checkpoint.finetune = true;
  Trainer t(m, run);
  t.load_checkpoint(dir);
  std::vector<float> losses;
  for (const IterationStats& s : t.run([](const std::string&) {}).iterations) losses.push_back(s.loss);
  return losses;
}

class HfRoundTrip : public ::testing::TestWithParam<ModelConfig (*)()> {};

// HF has no vocabulary padding: the export drops Megatron's padding rows and the import makes them
// zero. Every other bit comes back; without padding, so does the loss.
TEST_P(HfRoundTrip, ExportThenImportKeepsEveryBitAndTheLoss) {
  const ModelConfig m = GetParam()();
  test::TempDir dir;
  {
    Trainer t(m, short_run(m, dir.file("trained"), 3));
    t.run([](const std::string&) {});
  }
  convert("megatron", "hf", dir.file("trained"), dir.file("hf"));
  const nlohmann::json config = read_json_file(dir.file("hf") + "/config.json");
  EXPECT_EQ(config.at("torch_dtype"), m.params_dtype == DType::bf16 ? "bfloat16" : "float32");
  convert("hf", "megatron", dir.file("hf"), dir.file("back"));
  CheckpointReader trained(dir.file("trained"), std::nullopt), back(dir.file("back"), std::nullopt);
  EXPECT_EQ(back.manifest().model, trained.manifest().model);
  EXPECT_EQ(back.manifest().params_dtype, m.params_dtype);
  // The record holds the norm epsilon and RoPE base too: a key the export misspells comes back
  // as Hugging Face's default, which these models avoid.
  EXPECT_EQ(back.manifest().model.at("norm_epsilon"), trained.manifest().model.at("norm_epsilon"));
  ModelConfig c = m;
  c.finalize();
  for (const ParamSpec& p : param_specs(c, StageRange::whole(c))) {
    Shape shape;
    std::vector<float> want = trained.whole("param", p.name, p.shape, shape);
    const std::vector<float>& got = back.whole("param", p.name, p.shape, shape);
    ASSERT_EQ(got.size(), want.size()) << p.name;
    if (is_vocabulary_param(p.name))  // the padding rows come back as zeros
      std::fill(want.begin() + c.vocab_size * c.hidden_size, want.end(), 0.0f);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << p.name;
  }
  if (c.padded_vocab_size() == c.vocab_size) {
    EXPECT_EQ(losses_finetuned_from(m, dir.file("back")), losses_finetuned_from(m, dir.file("trained")));
  }
}

INSTANTIATE_TEST_SUITE_P(Convert, HfRoundTrip,
                         ::testing::Values(&gpt2_style, &llama_style, &gpt2_untied_exact_gelu,
                                           &llama_tied_biased_narrow_heads, &mixtral_style, &qwen3_style,
                                           &qwen3_moe_style));

// Muon's momentum is resharded as Adam's moments are.
TEST(Convert, OfflineReshardResumesExactlyAsTheOriginal) {
  for (const bool muon : {false, true}) {
    SCOPED_TRACE(muon ? "Muon" : "Adam");
    const ModelConfig m = gpt2_style();
    test::TempDir dir;
    TrainConfig run = short_run(m, dir.file("saved"), 6);
    run.checkpoint.save_interval = 3;
    run.schedule.lr_decay_style = "cosine";
    if (muon) run.optimizer.muon = MuonConfig{};
    {
      Trainer t(m, run);
      t.run([](const std::string&) {});
    }
    ConvertOptions o;
    o.loader = o.saver = "megatron";
    o.load_dir = dir.file("saved");
    o.save_dir = dir.file("resharded");
    o.ckpt_step = 3;
    o.target_tp = 2;
    o.target_pp = 2;
    convert_checkpoint(o);
    CheckpointReader resharded(dir.file("resharded"), std::nullopt);
    EXPECT_EQ(resharded.manifest().iteration, 3);
    EXPECT_EQ(resharded.manifest().layout.tp, 2);
    EXPECT_EQ(resharded.manifest().layout.pp, 2);
    EXPECT_EQ(resharded.manifest().files.size(), 4u);
    EXPECT_TRUE(resharded.manifest().optimizer_saved);

    const auto resume = [&](const std::string& from) {
      TrainConfig r = run;
      r.checkpoint.save.clear();
      r.checkpoint.save_interval = 0;
      r.checkpoint.ckpt_step = 3;
      Trainer t(m, r);
      EXPECT_EQ(t.load_checkpoint(from), 3);
      std::vector<std::pair<float, float>> curve;
      for (const IterationStats& s : t.run([](const std::string&) {}).iterations) curve.push_back({s.loss, s.grad_norm});
      return curve;
    };
    const auto want = resume(dir.file("saved"));
    ASSERT_EQ(want.size(), 3u);
    EXPECT_EQ(resume(dir.file("resharded")), want);
  }
}

// A copy of a fixture directory with config.json edited and tensors added.
std::string edited_fixture(const test::TempDir& dir, const std::string& name,
                           const std::function<void(nlohmann::json&)>& edit,
                           const std::vector<std::pair<std::string, TensorView>>& extra = {}) {
  const std::string out = dir.file("edited_" + name);
  fs::create_directories(out);
  nlohmann::json config = read_json_file(kGolden + "hf_" + name + "/config.json");
  edit(config);
  std::ofstream(out + "/config.json") << config.dump();
  const SafetensorsFile f = SafetensorsFile::load(kGolden + "hf_" + name + "/model.safetensors");
  std::vector<std::pair<std::string, TensorView>> tensors = extra;
  for (const std::string& t : f.names()) tensors.push_back({t, f.get(t)});
  save_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}});
  return out;
}

// LlamaForCausalLM rotates whole heads in the rotate-half form: a model trained with
// --rotary-percent below 1 or --rotary-interleaved has no counterpart and is refused, naming the
// flag, before anything is written; HF's partial_rotary_factor is refused on import. Resharding
// (megatron to megatron) keeps both settings.
TEST(Convert, PartialOrInterleavedRopeHasNoLlamaCounterpart) {
  test::TempDir dir;
  const auto refused = [&](const std::string& loader, const std::string& from, const std::string& needle) {
    const std::string to = dir.file("out");
    test::expect_error_mentioning([&] { convert(loader, loader == "hf" ? "megatron" : "hf", from, to, 1); }, needle);
    EXPECT_FALSE(fs::exists(to + "/model.safetensors")) << needle;
    EXPECT_FALSE(fs::exists(to + "/config.json")) << needle;
    EXPECT_FALSE(fs::exists(to + "/latest_checkpointed_iteration.txt")) << needle;
  };
  ModelConfig partial = llama_style();
  partial.rotary_percent = 0.5;
  ModelConfig interleaved = llama_style();
  interleaved.rotary_interleaved = true;
  for (const ModelConfig& m : {partial, interleaved}) {
    const std::string ckpt = dir.file(m.rotary_interleaved ? "interleaved" : "partial");
    Trainer t(m, short_run(m, ckpt, 1));
    t.run([](const std::string&) {});
  }
  refused("megatron", dir.file("partial"), "--rotary-percent 0.5");
  refused("megatron", dir.file("interleaved"), "--rotary-interleaved");
  refused("hf", edited_fixture(dir, "llama", [](nlohmann::json& c) { c["partial_rotary_factor"] = 0.5; }),
          "partial_rotary_factor");
  // Resharding to tp 2 keeps the settings in the manifest.
  const std::string resharded = dir.file("partial-tp2");
  convert("megatron", "megatron", dir.file("partial"), resharded, 2);
  CheckpointReader reader(resharded, std::nullopt);
  EXPECT_EQ(reader.manifest().model.at("rotary_percent").get<double>(), 0.5);
  EXPECT_FALSE(reader.manifest().model.at("rotary_interleaved").get<bool>());
}

TEST(Convert, UnsupportedModelsAndBadInputsAreRefused) {
  test::TempDir dir;
  const auto refused = [&](const std::string& loader, const std::string& saver, const std::string& from,
                           const std::string& needle, int tp = 1) {
    const std::string to = dir.file("out");
    test::expect_error_mentioning([&] { convert(loader, saver, from, to, tp); }, needle);
    EXPECT_FALSE(fs::exists(to + "/model.safetensors")) << needle;
    EXPECT_FALSE(fs::exists(to + "/latest_checkpointed_iteration.txt")) << needle;
    EXPECT_FALSE(fs::exists(to + "/iter_0000000.partial")) << needle;
    EXPECT_FALSE(fs::exists(to + "/iter_0000000")) << needle;
  };
  // Export: no HF architecture has LayerNorm with RoPE.
  ModelConfig hybrid = gpt2_style();
  hybrid.position_embedding_type = PositionEmbedding::rope;
  {
    Trainer t(hybrid, short_run(hybrid, dir.file("hybrid"), 1));
    t.run([](const std::string&) {});
  }
  refused("megatron", "hf", dir.file("hybrid"), "no Hugging Face counterpart");
  // Query and key norms export as Qwen3, which has no MLP biases; resharding keeps them.
  ModelConfig qk_norm = llama_style();
  qk_norm.qk_layernorm = true;
  qk_norm.add_bias_linear = true;
  {
    Trainer t(qk_norm, short_run(qk_norm, dir.file("qk_norm"), 1));
    t.run([](const std::string&) {});
  }
  refused("megatron", "hf", dir.file("qk_norm"), "Qwen3ForCausalLM");
  convert("megatron", "megatron", dir.file("qk_norm"), dir.file("qk_norm-tp2"), 2);
  EXPECT_TRUE(CheckpointReader(dir.file("qk_norm-tp2"), std::nullopt).manifest().model.at("qk_layernorm").get<bool>());
  refused("hf", "megatron", edited_fixture(dir, "qwen3", [](nlohmann::json& c) { c["use_sliding_window"] = true; }),
          "use_sliding_window");
  refused("hf", "megatron", edited_fixture(dir, "qwen3_moe", [](nlohmann::json& c) { c["mlp_only_layers"] = {0}; }),
          "mlp_only_layers");  // Import: options we do not implement, tensors we have no place for, shapes that disagree.
  refused("hf", "megatron",
          edited_fixture(dir, "llama", [](nlohmann::json& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }),
          "rope_scaling");
  refused("hf", "megatron",
          edited_fixture(dir, "llama",
                         [](nlohmann::json& c) { c["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 5e5}}; }),
          "rope_type \"llama3\"");
  refused("hf", "megatron",
          edited_fixture(dir, "gpt2", [](nlohmann::json& c) { c["scale_attn_by_inverse_layer_idx"] = true; }),
          "scale_attn_by_inverse_layer_idx");
  refused("hf", "megatron", edited_fixture(dir, "gpt2", [](nlohmann::json& c) { c["model_type"] = "mistral"; }),
          "model_type \"mistral\"");
  std::vector<float> norm(8, 1.0f);
  refused("hf", "megatron",
          edited_fixture(dir, "llama", [](nlohmann::json&) {},
                         {{"model.layers.0.self_attn.q_norm.weight", TensorView(norm.data(), DType::f32, {8})}}),
          "q_norm");
  refused("hf", "megatron", edited_fixture(dir, "gpt2", [](nlohmann::json& c) { c["n_inner"] = 96; }), "has shape");
  refused("hf", "megatron", edited_fixture(dir, "gpt2", [](nlohmann::json& c) { c["n_layer"] = 3; }),
          "lacks tensor transformer.h.2.");
  // Layouts and options.
  refused("hf", "megatron", kGolden + "hf_llama", "divisible", /*tp=*/3);
  refused("hf", "hf", kGolden + "hf_llama", "converts nothing");
  refused("hf", "megatron", dir.file("nothing_here"), "does not exist");
  test::expect_error_mentioning(
      [&] {
        cmd_convert({"--loader", "megatron", "--saver", "hf", "--load-dir", dir.file("hybrid"), "--save-dir",
                     dir.file("x"), "--target-tensor-parallel-size", "2"});
      },
      "a Hugging Face model has no parallel layout");
}

}  // namespace
}  // namespace mt
