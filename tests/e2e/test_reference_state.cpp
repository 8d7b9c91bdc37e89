// Reference-state test (llm.c style): tools/ref/gpt_ref.py builds the same GPT in PyTorch (fp64)
// from the weights and inputs stored in tests/golden/ref_*.safetensors and records logits, loss,
// every parameter gradient and a 10-step AdamW trajectory. We load the same weights, run the
// same steps in fp32 and compare everything.
#include <cmath>
#include <cstdio>
#include <string>

#include "ckpt/safetensors.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "testing.h"

namespace mt {
namespace {

ModelConfig config_from_fixture(const SafetensorsFile& f) {
  auto integer = [&](const char* key) { return static_cast<int64_t>(std::stoll(f.meta(key))); };
  auto real = [&](const char* key) { return std::stod(f.meta(key)); };
  ModelConfig c;
  c.num_layers = integer("num_layers");
  c.hidden_size = integer("hidden_size");
  c.num_attention_heads = integer("num_attention_heads");
  c.num_query_groups = integer("num_query_groups");
  c.kv_channels = integer("kv_channels");
  c.ffn_hidden_size = integer("ffn_hidden_size");
  c.seq_length = integer("seq_length");
  c.vocab_size = integer("vocab_size");
  c.make_vocab_size_divisible_by = integer("padded_vocab_size");  // pads vocab_size to exactly that
  c.max_position_embeddings = integer("max_position_embeddings");
  c.normalization = f.meta("normalization") == "RMSNorm" ? Normalization::rmsnorm : Normalization::layernorm;
  c.norm_epsilon = static_cast<float>(real("norm_epsilon"));
  const std::string act = f.meta("activation");
  c.activation = act == "swiglu" ? Activation::swiglu : act == "gelu_tanh" ? Activation::gelu_tanh : Activation::gelu;
  c.add_bias_linear = f.meta("add_bias_linear") == "true";
  c.position_embedding_type =
      f.meta("position_embedding_type") == "rope" ? PositionEmbedding::rope : PositionEmbedding::learned_absolute;
  c.rotary_base = real("rotary_base");
  c.untie_embeddings_and_output_weights = f.meta("untie_embeddings_and_output_weights") == "true";
  c.qk_layernorm = f.metadata().count("qk_layernorm") && f.meta("qk_layernorm") == "true";
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  c.finalize();
  return c;
}

std::vector<double> as_double(const TensorView& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.f32()[i];
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

double max_abs_diff(const float* a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

void run_reference_state(const std::string& fixture, AttentionImpl impl) {
  const SafetensorsFile f = SafetensorsFile::load(std::string(MT_SOURCE_DIR) + "/tests/golden/" + fixture);
  ModelConfig c = config_from_fixture(f);
  c.attention_impl = impl;
  const TensorView tokens = f.get("tokens"), labels = f.get("labels");
  const int64_t b = tokens.dim(0);
  MemoryTracker memory;
  GptModelOptions options;
  options.head_chunk_tokens = b * c.seq_length;  // one chunk, so the logits can be inspected
  GptModel model(c, b, cpu_backend(), &memory, options);
  const MicroBatch batch{tokens, labels, TensorView()};
  const float grad_scale = 1.0f / static_cast<float>(b * c.seq_length);  // d(mean loss)
  for (Param& p : model.params().params()) {
    const TensorView src = f.get(p.name);
    ASSERT_EQ(src.shape, p.value.shape) << p.name;
    std::copy(src.f32(), src.f32() + src.numel(), p.value.f32());
  }
  ASSERT_EQ(model.params().params().size() * 2 + 6, f.names().size()) << "fixture and model disagree on the parameter set";

  // Logits, loss and every gradient at the initial weights.
  const LossSums eval = model.forward(batch, {});
  const double loss = eval.loss_sum / eval.num_tokens;
  const std::vector<double> ref_logits = as_double(f.get("logits"));
  const double logits_diff = max_abs_diff(model.last_logits_chunk().f32(), ref_logits);
  const double ref_loss = f.get("loss").f32()[0];
  std::printf("[%s] logits max |diff| %.3e (max |logit| %.3f), loss %.7f vs %.7f\n", fixture.c_str(), logits_diff,
              max_abs(ref_logits), loss, ref_loss);
  // fp32 against fp64: observed ~4e-7 (a few ulps of the largest logit); 20x margin.
  EXPECT_LT(logits_diff, 1e-5);
  EXPECT_NEAR(loss, ref_loss, 1e-5);
  model.params().zero_grads();
  ForwardOptions train;
  train.grad_scale = grad_scale;
  EXPECT_EQ(model.forward(batch, train).loss_sum, eval.loss_sum);
  model.backward();
  double worst = 0.0;
  std::string worst_name;
  for (const Param& p : model.params().params()) {
    const std::vector<double> ref = as_double(f.get("grad." + p.name));
    // Relative to the tensor's largest gradient: entries that are zero in theory (the key bias)
    // are float noise in both.
    const double rel = max_abs_diff(p.grad.f32(), ref) / std::max(max_abs(ref), 1e-6);
    if (rel > worst) worst = rel, worst_name = p.name;
    EXPECT_LT(rel, 2e-5) << "gradient of " << p.name;
  }
  std::printf("[%s] gradients: worst max|diff|/max|grad| %.3e (%s)\n", fixture.c_str(), worst, worst_name.c_str());

  // 10 AdamW steps with clipping, from the same weights.
  for (Param& p : model.params().params()) {
    const TensorView src = f.get(p.name);
    std::copy(src.f32(), src.f32() + src.numel(), p.value.f32());
  }
  OptimizerConfig oc;
  oc.lr = static_cast<float>(std::stod(f.meta("lr")));
  oc.adam_beta1 = static_cast<float>(std::stod(f.meta("adam_beta1")));
  oc.adam_beta2 = static_cast<float>(std::stod(f.meta("adam_beta2")));
  oc.adam_eps = static_cast<float>(std::stod(f.meta("adam_eps")));
  oc.weight_decay = static_cast<float>(std::stod(f.meta("weight_decay")));
  oc.clip_grad = static_cast<float>(std::stod(f.meta("clip_grad")));
  Optimizer optimizer(model.params().params(), cpu_backend(), &memory);
  const TensorView ref_losses = f.get("traj.loss"), ref_norms = f.get("traj.grad_norm");
  double worst_loss = 0.0, worst_norm = 0.0;
  for (int64_t step = 0; step < ref_losses.numel(); ++step) {
    model.params().zero_grads();
    const LossSums sums = model.forward(batch, train);
    const double l = sums.loss_sum / sums.num_tokens;
    model.backward();
    const auto result = optimizer.step(oc, oc.lr, oc.weight_decay);
    worst_loss = std::max(worst_loss, std::fabs(l - ref_losses.f32()[step]));
    worst_norm = std::max(worst_norm, std::fabs(result.grad_norm / ref_norms.f32()[step] - 1.0));
    EXPECT_NEAR(l, ref_losses.f32()[step], 1e-5) << "loss at step " << step;
    EXPECT_NEAR(result.grad_norm / ref_norms.f32()[step], 1.0, 2e-5) << "grad norm at step " << step;
  }
  std::printf("[%s] 10-step trajectory: max |loss diff| %.3e, max grad-norm rel diff %.3e\n", fixture.c_str(),
              worst_loss, worst_norm);
}

TEST(ReferenceState, Gpt2StyleMatchesPyTorch) { run_reference_state("ref_gpt2.safetensors", AttentionImpl::flash); }
TEST(ReferenceState, LlamaStyleMatchesPyTorch) { run_reference_state("ref_llama.safetensors", AttentionImpl::flash); }
// --qk-layernorm (Qwen3's per-head RMSNorm before RoPE), head dim 12 with hidden 32 and 4 heads.
TEST(ReferenceState, Qwen3StyleQkLayernormMatchesPyTorch) {
  run_reference_state("ref_qwen3.safetensors", AttentionImpl::flash);
}
TEST(ReferenceState, Gpt2StyleUnfusedAttentionMatchesPyTorch) {
  run_reference_state("ref_gpt2.safetensors", AttentionImpl::unfused);
}
TEST(ReferenceState, LlamaStyleUnfusedAttentionMatchesPyTorch) {
  run_reference_state("ref_llama.safetensors", AttentionImpl::unfused);
}

}  // namespace
}  // namespace mt
