#include "model/hf_format.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "model/params.h"

namespace mt {

namespace {

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    default: MT_FAIL() << "Hugging Face export stores f32, bf16 or f16 tensors, not " << dtype_name(d);
  }
}

// A float setting as the shortest decimal that reads back as it (1e-05, not 9.99999974e-06).
double decimal(float x) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text - 1, x).ptr;
  *end = '\0';
  return std::strtod(text, nullptr);
}

std::string describe(const ModelConfig& c) {
  const char* norm = c.normalization == Normalization::layernorm ? "LayerNorm" : "RMSNorm";
  return std::string(norm) + ", " + position_embedding_name(c.position_embedding_type) + " and " +
         activation_name(c.activation);
}

// The value of `key`, or `fallback` when config.json lacks it or holds null.
template <typename T>
T field(const nlohmann::json& config, const char* key, T fallback, const std::string& path) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  try {
    return config.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    MT_FAIL() << path << ": \"" << key << "\" is " << config.at(key).dump() << ", not a value of the expected type";
  }
}

template <typename T>
T required(const nlohmann::json& config, const char* key, const std::string& path) {
  MT_CHECK(config.contains(key) && !config.at(key).is_null()) << path << " has no \"" << key << "\"";
  return field<T>(config, key, T{}, path);
}

ModelConfig gpt2_from_hf(const nlohmann::json& j, const std::string& path) {
  ModelConfig c;
  c.hidden_size = required<int64_t>(j, "n_embd", path);
  c.num_layers = required<int64_t>(j, "n_layer", path);
  c.num_attention_heads = required<int64_t>(j, "n_head", path);
  c.ffn_hidden_size = field<int64_t>(j, "n_inner", 4 * c.hidden_size, path);
  c.max_position_embeddings = required<int64_t>(j, "n_positions", path);
  c.vocab_size = required<int64_t>(j, "vocab_size", path);
  c.norm_epsilon = field<float>(j, "layer_norm_epsilon", 1e-5f, path);
  const std::string act = field<std::string>(j, "activation_function", "gelu_new", path);
  MT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu")
      << path << ": activation_function \"" << act << "\" is not supported (gelu_new, gelu_pytorch_tanh or gelu)";
  c.activation = act == "gelu" ? Activation::gelu : Activation::gelu_tanh;
  c.untie_embeddings_and_output_weights = !field<bool>(j, "tie_word_embeddings", true, path);
  MT_CHECK(field<bool>(j, "scale_attn_weights", true, path)) << path << ": scale_attn_weights false is not supported";
  MT_CHECK(!field<bool>(j, "scale_attn_by_inverse_layer_idx", false, path))
      << path << ": scale_attn_by_inverse_layer_idx is not supported";
  MT_CHECK(!field<bool>(j, "add_cross_attention", false, path)) << path << ": cross-attention is not supported";
  MT_CHECK(c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0)
      << path << ": n_embd " << c.hidden_size << " is not a multiple of n_head " << c.num_attention_heads;
  c.normalization = Normalization::layernorm;
  c.position_embedding_type = PositionEmbedding::learned_absolute;
  c.add_bias_linear = true;
  return c;
}

ModelConfig llama_from_hf(const nlohmann::json& j, const std::string& path) {
  ModelConfig c;
  c.hidden_size = required<int64_t>(j, "hidden_size", path);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", path);
  c.num_attention_heads = required<int64_t>(j, "num_attention_heads", path);
  MT_CHECK(c.num_attention_heads > 0) << path << ": num_attention_heads must be positive";
  c.num_query_groups = field<int64_t>(j, "num_key_value_heads", c.num_attention_heads, path);
  c.kv_channels = field<int64_t>(j, "head_dim", c.hidden_size / c.num_attention_heads, path);
  c.ffn_hidden_size = required<int64_t>(j, "intermediate_size", path);
  c.max_position_embeddings = required<int64_t>(j, "max_position_embeddings", path);
  c.vocab_size = required<int64_t>(j, "vocab_size", path);
  c.norm_epsilon = field<float>(j, "rms_norm_eps", 1e-6f, path);
  c.rotary_base = field<double>(j, "rope_theta", 10000.0, path);
  const std::string act = field<std::string>(j, "hidden_act", "silu", path);
  MT_CHECK(act == "silu") << path << ": hidden_act \"" << act << "\" is not supported (silu: SwiGLU)";
  MT_CHECK(!j.contains("rope_scaling") || j.at("rope_scaling").is_null())
      << path << ": rope_scaling " << j.at("rope_scaling").dump() << " is not supported (plain RoPE only)";
  // Newer transformers releases keep the RoPE settings in one object.
  if (j.contains("rope_parameters") && !j.at("rope_parameters").is_null()) {
    const nlohmann::json& rope = j.at("rope_parameters");
    MT_CHECK(rope.is_object()) << path << ": rope_parameters is not an object";
    const std::string type = field<std::string>(rope, "rope_type", "default", path);
    MT_CHECK(type == "default") << path << ": rope_parameters.rope_type \"" << type
                                << "\" is not supported (plain RoPE only)";
    c.rotary_base = field<double>(rope, "rope_theta", c.rotary_base, path);
    MT_CHECK(field<double>(rope, "partial_rotary_factor", 1.0, path) == 1.0)
        << path << ": rope_parameters.partial_rotary_factor is not supported: LlamaForCausalLM's attention rotates "
        << "whole heads (a model trained with --rotary-percent has no Llama counterpart)";
  }
  MT_CHECK(field<double>(j, "partial_rotary_factor", 1.0, path) == 1.0)
      << path << ": partial_rotary_factor is not supported: LlamaForCausalLM's attention rotates whole heads (a "
      << "model trained with --rotary-percent has no Llama counterpart)";
  const bool attention_bias = field<bool>(j, "attention_bias", false, path);
  MT_CHECK(attention_bias == field<bool>(j, "mlp_bias", false, path))
      << path << ": attention_bias and mlp_bias differ; megatron.cpp has one switch for both (--disable-bias-linear)";
  c.add_bias_linear = attention_bias;
  c.untie_embeddings_and_output_weights = !field<bool>(j, "tie_word_embeddings", false, path);
  c.normalization = Normalization::rmsnorm;
  c.position_embedding_type = PositionEmbedding::rope;
  c.activation = Activation::swiglu;
  return c;
}

// Qwen3: Llama's layers (no biases, no sliding window) with norms on the query and key heads.
ModelConfig qwen3_from_hf(const nlohmann::json& j, const std::string& path) {
  ModelConfig c = llama_from_hf(j, path);
  MT_CHECK(!field<bool>(j, "use_sliding_window", false, path))
      << path << ": use_sliding_window true is not supported (full causal attention)";
  c.qk_layernorm = true;
  return c;
}

// Qwen3-MoE: every layer's MLP a dropless top-k mixture of moe_intermediate_size experts.
ModelConfig qwen3_moe_from_hf(const nlohmann::json& j, const std::string& path) {
  ModelConfig c = qwen3_from_hf(j, path);
  MT_CHECK(field<int64_t>(j, "decoder_sparse_step", 1, path) == 1 &&
           field<nlohmann::json>(j, "mlp_only_layers", nlohmann::json::array(), path).empty())
      << path << ": decoder_sparse_step and mlp_only_layers must give every layer experts (a dense layer among "
      << "them is not supported here)";
  c.moe.num_experts = required<int64_t>(j, "num_experts", path);
  c.moe.router.topk = required<int64_t>(j, "num_experts_per_tok", path);
  c.moe.ffn_hidden_size = required<int64_t>(j, "moe_intermediate_size", path);
  // Softmax over every expert, then the chosen k renormalised: Megatron's softmax over the chosen
  // k; without the renormalisation: --moe-router-pre-softmax.
  c.moe.router.pre_softmax = !field<bool>(j, "norm_topk_prob", false, path);
  c.moe.aux_loss_coeff = field<double>(j, "router_aux_loss_coef", 0.0, path);
  return c;
}

// Mixtral: Llama's layers with every MLP a dropless top-k mixture of intermediate_size experts.
ModelConfig mixtral_from_hf(const nlohmann::json& j, const std::string& path) {
  ModelConfig c = llama_from_hf(j, path);
  MT_CHECK(field<std::string>(j, "hidden_act", "silu", path) == "silu") << path << ": Mixtral's experts are SwiGLU";
  MT_CHECK(!j.contains("sliding_window") || j.at("sliding_window").is_null())
      << path << ": sliding_window " << j.at("sliding_window").dump() << " is not supported (full causal attention)";
  c.moe.num_experts = required<int64_t>(j, "num_local_experts", path);
  c.moe.router.topk = field<int64_t>(j, "num_experts_per_tok", 2, path);
  c.moe.ffn_hidden_size = c.ffn_hidden_size;
  c.moe.aux_loss_coeff = field<double>(j, "router_aux_loss_coef", 0.0, path);
  return c;
}

}  // namespace

namespace {

// Llama's and Mixtral's attention (transformers' apply_rotary_pos_emb) rotates every element of
// each head in the rotate-half form: cos/sin as wide as the head, no pass-through. Its config's
// partial_rotary_factor narrows only the tables, which that attention then cannot broadcast, and
// it has no interleaved form; so neither setting has a counterpart.
void check_hf_rope(const ModelConfig& c, const char* architecture) {
  MT_CHECK(c.rotary_percent == 1.0)
      << "this model was trained with --rotary-percent " << c.rotary_percent << " (RoPE on " << c.rotary_dim() << " of "
      << c.kv_channels << " head dims), which " << architecture
      << " cannot express: its attention rotates whole heads (its partial_rotary_factor is not applied by "
         "LlamaAttention); export supports --rotary-percent 1.0 only";
  MT_CHECK(!c.rotary_interleaved)
      << "this model was trained with --rotary-interleaved (RoPE on the pairs (2i, 2i+1)), which " << architecture
      << " cannot express: its attention rotates the pairs (i, i + d/2) (rotate_half); export supports models "
         "trained without --rotary-interleaved only";
}

bool llama_like(const ModelConfig& c) {
  return c.normalization == Normalization::rmsnorm && c.position_embedding_type == PositionEmbedding::rope &&
         c.activation == Activation::swiglu;
}

// What Mixtral's and Qwen3-MoE's sparse blocks hold: SwiGLU experts in every layer, softmax
// routing without a shared expert, scaling, groups, expert bias or capacity; `pre_softmax` says
// whether the architecture can leave the chosen k unnormalised.
void check_hf_moe(const ModelConfig& c, const char* architecture, bool pre_softmax) {
  const MoeConfig& m = c.moe;
  bool every_layer = true;
  for (int64_t i = 0; i < c.num_layers; ++i) every_layer = every_layer && c.mlp_kind(i) == MlpKind::moe;
  MT_CHECK(llama_like(c) && every_layer && m.shared_expert_intermediate_size == 0 && !c.add_bias_linear &&
           m.router.score_function == MoeScoreFunction::softmax && (pre_softmax || !m.router.pre_softmax) &&
           m.router.scaling_factor == 0.0f && m.router.num_groups == 0 && !m.expert_bias && !m.capacity.capacity_factor)
      << "this mixture-of-experts model has no Hugging Face counterpart here: " << architecture
      << " has RMSNorm, RoPE, SwiGLU experts in every layer, no shared expert, no biases, and softmax routing "
      << (pre_softmax ? "(over the chosen experts, or with --moe-router-pre-softmax over all) "
                      : "over the chosen experts ")
      << "without scaling, groups, expert bias or capacity";
}

// --qk-layernorm: Qwen3 (dense) or Qwen3-MoE.
HfArchitecture qwen3_architecture(const ModelConfig& c) {
  const char* name = c.moe.enabled() ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM";
  MT_CHECK(llama_like(c) && !c.add_bias_linear)
      << "a model trained with --qk-layernorm exports as " << name << ", which has RMSNorm, RoPE, SwiGLU and no "
      << "biases in its MLP; this model has " << describe(c) << (c.add_bias_linear ? " with biases" : "");
  check_hf_rope(c, name);
  if (!c.moe.enabled()) return HfArchitecture::qwen3;
  check_hf_moe(c, name, /*pre_softmax=*/true);
  return HfArchitecture::qwen3_moe;
}

}  // namespace

HfArchitecture hf_architecture_of(const ModelConfig& c) {
  MT_CHECK(!c.layernorm_zero_centered_gamma)
      << "a model trained with --apply-layernorm-1p (norms scale by 1 + weight) has no Hugging Face counterpart here";
  if (c.qk_layernorm) return qwen3_architecture(c);
  if (c.moe.enabled()) {
    check_hf_moe(c, "MixtralForCausalLM", /*pre_softmax=*/false);
    check_hf_rope(c, "MixtralForCausalLM");
    return HfArchitecture::mixtral;
  }
  if (c.normalization == Normalization::layernorm && c.position_embedding_type == PositionEmbedding::learned_absolute &&
      (c.activation == Activation::gelu || c.activation == Activation::gelu_tanh)) {
    MT_CHECK(c.add_bias_linear) << "GPT2LMHeadModel has biases in every linear layer; this model was trained with "
                                << "--disable-bias-linear";
    MT_CHECK(c.num_query_groups == c.num_attention_heads)
        << "GPT2LMHeadModel has no grouped-query attention; this model has " << c.num_query_groups
        << " query groups for " << c.num_attention_heads << " heads";
    MT_CHECK(c.kv_channels * c.num_attention_heads == c.hidden_size)
        << "GPT2LMHeadModel's head dimension is hidden / heads; this model's --kv-channels is " << c.kv_channels;
    return HfArchitecture::gpt2;
  }
  if (llama_like(c)) {
    check_hf_rope(c, "LlamaForCausalLM");
    return HfArchitecture::llama;
  }
  MT_FAIL() << "a model with " << describe(c) << " has no Hugging Face counterpart here: export supports "
            << "GPT2LMHeadModel (LayerNorm, learned positions, GeLU), LlamaForCausalLM (RMSNorm, RoPE, SwiGLU) and "
            << "its relatives MixtralForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM";
}

const char* hf_architecture_name(HfArchitecture a) {
  switch (a) {
    case HfArchitecture::gpt2: return "GPT2LMHeadModel";
    case HfArchitecture::llama: return "LlamaForCausalLM";
    case HfArchitecture::mixtral: return "MixtralForCausalLM";
    case HfArchitecture::qwen3: return "Qwen3ForCausalLM";
    case HfArchitecture::qwen3_moe: return "Qwen3MoeForCausalLM";
  }
  return "?";
}

nlohmann::json hf_config(const ModelConfig& c, DType dtype) {
  const HfArchitecture arch = hf_architecture_of(c);
  nlohmann::json j = {{"architectures", {hf_architecture_name(arch)}},
                      {"vocab_size", c.vocab_size},
                      {"tie_word_embeddings", !c.untie_embeddings_and_output_weights},
                      {"initializer_range", decimal(c.init_method_std)},
                      {"torch_dtype", torch_dtype_name(dtype)},
                      {"use_cache", true}};
  if (arch == HfArchitecture::gpt2) {
    j.update({{"model_type", "gpt2"},
              {"n_embd", c.hidden_size},
              {"n_layer", c.num_layers},
              {"n_head", c.num_attention_heads},
              {"n_inner", c.ffn_hidden_size},
              {"n_positions", c.max_position_embeddings},
              {"n_ctx", c.max_position_embeddings},
              {"activation_function", c.activation == Activation::gelu ? "gelu" : "gelu_new"},
              {"layer_norm_epsilon", decimal(c.norm_epsilon)},
              {"resid_pdrop", 0.1},  // HF's defaults: checkpoints do not record the training rates
              {"embd_pdrop", 0.1},
              {"attn_pdrop", 0.1},
              {"scale_attn_weights", true},
              {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false}});
  } else {
    j.update({{"model_type", "llama"},
              {"hidden_size", c.hidden_size},
              {"num_hidden_layers", c.num_layers},
              {"num_attention_heads", c.num_attention_heads},
              {"num_key_value_heads", c.num_query_groups},
              {"head_dim", c.kv_channels},
              {"intermediate_size", c.ffn_hidden_size},
              {"max_position_embeddings", c.max_position_embeddings},
              {"rms_norm_eps", decimal(c.norm_epsilon)},
              {"rope_theta", c.rotary_base},
              {"rope_scaling", nullptr},
              {"hidden_act", "silu"},
              {"attention_bias", c.add_bias_linear},
              {"mlp_bias", c.add_bias_linear},
              {"attention_dropout", 0.0},  // HF's default (see GPT-2's)
              {"pretraining_tp", 1}});
  }
  if (arch == HfArchitecture::mixtral)
    j.update({{"model_type", "mixtral"},
              {"intermediate_size", c.moe.ffn_hidden_size},
              {"num_local_experts", c.moe.num_experts},
              {"num_experts_per_tok", c.moe.router.topk},
              {"router_aux_loss_coef", c.moe.aux_loss_coeff},
              {"output_router_logits", false},
              {"sliding_window", nullptr}});
  if (arch == HfArchitecture::qwen3 || arch == HfArchitecture::qwen3_moe) {
    j.erase("mlp_bias");  // Qwen3's MLP has no biases (and its config no such key)
    j.erase("pretraining_tp");
    j.update({{"model_type", "qwen3"}, {"use_sliding_window", false}, {"sliding_window", nullptr},
              {"max_window_layers", c.num_layers}});
  }
  if (arch == HfArchitecture::qwen3_moe)
    j.update({{"model_type", "qwen3_moe"},
              {"num_experts", c.moe.num_experts},
              {"num_experts_per_tok", c.moe.router.topk},
              {"moe_intermediate_size", c.moe.ffn_hidden_size},
              {"norm_topk_prob", !c.moe.router.pre_softmax},
              {"decoder_sparse_step", 1},
              {"mlp_only_layers", nlohmann::json::array()},
              {"router_aux_loss_coef", c.moe.aux_loss_coeff},
              {"output_router_logits", false}});
  return j;
}

ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path) {
  MT_CHECK(config.is_object()) << path << " is not a JSON object";
  const std::string type = field<std::string>(config, "model_type", "", path);
  ModelConfig c;
  if (type == "gpt2")
    c = gpt2_from_hf(config, path);
  else if (type == "llama")
    c = llama_from_hf(config, path);
  else if (type == "mixtral")
    c = mixtral_from_hf(config, path);
  else if (type == "qwen3")
    c = qwen3_from_hf(config, path);
  else if (type == "qwen3_moe")
    c = qwen3_moe_from_hf(config, path);
  else
    MT_FAIL() << path << ": model_type \"" << type << "\" is not supported; import reads gpt2 (GPT2LMHeadModel), "
              << "llama (LlamaForCausalLM), mixtral (MixtralForCausalLM), qwen3 (Qwen3ForCausalLM) and qwen3_moe "
              << "(Qwen3MoeForCausalLM)";
  c.seq_length = c.max_position_embeddings;
  c.make_vocab_size_divisible_by = 128;
  return c;
}

DType hf_torch_dtype(const nlohmann::json& config) {
  const std::string name = config.is_object() && config.contains("torch_dtype") && config.at("torch_dtype").is_string()
                               ? config.at("torch_dtype").get<std::string>()
                               : "float32";
  return name == "bfloat16" ? DType::bf16 : name == "float16" ? DType::f16 : DType::f32;
}

HfParamMap::HfParamMap(const ModelConfig& c, const std::string& name, const Shape& shape)
    : megatron_(shape), heads_(c.num_attention_heads), groups_(c.num_query_groups), head_dim_(c.kv_channels) {
  name_tensors(c, name, shape);
}

void HfParamMap::name_tensors(const ModelConfig& c, const std::string& name, const Shape& shape) {
  const HfArchitecture arch = hf_architecture_of(c);
  const bool gpt2 = arch == HfArchitecture::gpt2;
  const int64_t h = c.hidden_size, v = c.vocab_size;
  const auto one = [&](const std::string& hf_name, Shape hf_shape) { hf_.push_back({hf_name, hf_shape}); };
  const auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  const std::string kind = ends_with(".bias") ? "bias" : "weight";

  if (is_vocabulary_param(name)) {
    megatron_ = Shape{v, h};  // the padding rows stay behind
    const bool embedding = name[0] == 'e';
    one(embedding ? (gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight") : "lm_head.weight", megatron_);
    return;
  }
  if (name == "embedding.position_embeddings.weight") return one("transformer.wpe.weight", shape);
  if (name.rfind("decoder.final_layernorm.", 0) == 0) return one((gpt2 ? "transformer.ln_f." : "model.norm.") + kind, shape);
  const std::string layers = "decoder.layers.";
  MT_CHECK(name.rfind(layers, 0) == 0) << "no Hugging Face name for parameter " << name;
  const size_t dot = name.find('.', layers.size());
  const std::string index = name.substr(layers.size(), dot - layers.size());
  const std::string rest = name.substr(dot + 1);
  const std::string prefix = (gpt2 ? "transformer.h." : "model.layers.") + index + ".";
  const auto transposed = [&](const std::string& hf_name) {
    transpose_ = shape.ndim == 2;
    one(hf_name, transpose_ ? Shape{shape.dims[1], shape.dims[0]} : shape);
  };
  // A 2-D weight keeps its columns, a bias is 1-D: the row count of an HF piece.
  const auto rows_of = [&](int64_t rows) { return shape.ndim == 2 ? Shape{rows, shape.dims[1]} : Shape{rows}; };

  if (rest.rfind("input_layernorm.", 0) == 0) return one(prefix + (gpt2 ? "ln_1." : "input_layernorm.") + kind, shape);
  if (rest.rfind("pre_mlp_layernorm.", 0) == 0)
    return one(prefix + (gpt2 ? "ln_2." : "post_attention_layernorm.") + kind, shape);
  if (rest.rfind("self_attention.linear_qkv.", 0) == 0) {
    qkv_rows_ = true;
    if (gpt2) return transposed(prefix + "attn.c_attn." + kind);
    one(prefix + "self_attn.q_proj." + kind, rows_of(heads_ * head_dim_));
    one(prefix + "self_attn.k_proj." + kind, rows_of(groups_ * head_dim_));
    one(prefix + "self_attn.v_proj." + kind, rows_of(groups_ * head_dim_));
    return;
  }
  if (rest == "self_attention.q_layernorm.weight") return one(prefix + "self_attn.q_norm.weight", shape);
  if (rest == "self_attention.k_layernorm.weight") return one(prefix + "self_attn.k_norm.weight", shape);
  if (rest.rfind("self_attention.linear_proj.", 0) == 0) {
    if (gpt2) return transposed(prefix + "attn.c_proj." + kind);
    return one(prefix + "self_attn.o_proj." + kind, shape);
  }
  // Mixtral's sparse block and its experts' w1 (gate), w3 (up), w2; Qwen3-MoE's names them as a
  // dense MLP's.
  const bool mixtral = arch == HfArchitecture::mixtral;
  const std::string sparse = prefix + (mixtral ? "block_sparse_moe." : "mlp.");
  if (rest == "mlp.router.weight") return one(sparse + "gate.weight", shape);
  // Stacked experts, expert after expert: each one's gate and up halves of fc1, or its fc2.
  if (rest == "mlp.experts.linear_fc1.weight" || rest == "mlp.experts.linear_fc2.weight") {
    const bool fc1 = rest == "mlp.experts.linear_fc1.weight";
    for (int64_t e = 0; e < shape.dims[0]; ++e) {
      const std::string expert = sparse + "experts." + std::to_string(e) + ".";
      if (!fc1) {
        one(expert + (mixtral ? "w2" : "down_proj") + ".weight", {shape.dims[1], shape.dims[2]});
        continue;
      }
      one(expert + (mixtral ? "w1" : "gate_proj") + ".weight", {shape.dims[1] / 2, shape.dims[2]});
      one(expert + (mixtral ? "w3" : "up_proj") + ".weight", {shape.dims[1] / 2, shape.dims[2]});
    }
    return;
  }
  if (rest.rfind("mlp.linear_fc1.", 0) == 0) {
    if (gpt2) return transposed(prefix + "mlp.c_fc." + kind);
    one(prefix + "mlp.gate_proj." + kind, rows_of(c.ffn_hidden_size));
    one(prefix + "mlp.up_proj." + kind, rows_of(c.ffn_hidden_size));
    return;
  }
  if (rest.rfind("mlp.linear_fc2.", 0) == 0) {
    if (gpt2) return transposed(prefix + "mlp.c_proj." + kind);
    return one(prefix + "mlp.down_proj." + kind, shape);
  }
  MT_FAIL() << "no Hugging Face name for parameter " << name;
}

int64_t HfParamMap::hf_row(int64_t r) const {
  if (!qkv_rows_) return r;
  const int64_t per_group = heads_ / groups_, d = head_dim_;
  const int64_t group = r / ((per_group + 2) * d), slot = r % ((per_group + 2) * d) / d, j = r % d;
  if (slot < per_group) return (group * per_group + slot) * d + j;        // query head
  if (slot == per_group) return heads_ * d + group * d + j;               // key head
  return (heads_ + groups_) * d + group * d + j;                          // value head
}

void HfParamMap::to_hf(const float* megatron, const std::vector<float*>& out, std::vector<float>& scratch) const {
  MT_CHECK(out.size() == hf_.size()) << "to_hf: " << out.size() << " outputs for " << hf_.size() << " tensors";
  const int64_t rows = megatron_.ndim >= 1 ? megatron_.dims[0] : 1, cols = megatron_.numel() / std::max<int64_t>(rows, 1);
  scratch.resize(static_cast<size_t>(megatron_.numel()));
  for (int64_t r = 0; r < rows; ++r) std::copy_n(megatron + r * cols, cols, scratch.data() + hf_row(r) * cols);
  if (transpose_) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) out[0][k * rows + r] = scratch[r * cols + k];
    return;
  }
  const float* from = scratch.data();
  for (size_t i = 0; i < hf_.size(); ++i) {
    std::copy_n(from, hf_[i].shape.numel(), out[i]);
    from += hf_[i].shape.numel();
  }
}

void HfParamMap::from_hf(const std::vector<const float*>& in, float* megatron, std::vector<float>& scratch) const {
  MT_CHECK(in.size() == hf_.size()) << "from_hf: " << in.size() << " inputs for " << hf_.size() << " tensors";
  const int64_t rows = megatron_.ndim >= 1 ? megatron_.dims[0] : 1, cols = megatron_.numel() / std::max<int64_t>(rows, 1);
  scratch.resize(static_cast<size_t>(megatron_.numel()));
  if (transpose_) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) scratch[r * cols + k] = in[0][k * rows + r];
  } else {
    float* to = scratch.data();
    for (size_t i = 0; i < hf_.size(); ++i) to = std::copy_n(in[i], hf_[i].shape.numel(), to);
  }
  for (int64_t r = 0; r < rows; ++r) std::copy_n(scratch.data() + hf_row(r) * cols, cols, megatron + r * cols);
}

}  // namespace mt
