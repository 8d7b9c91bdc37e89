#include "train/checkpoint_args.h"

#include "base/error.h"
#include "ckpt/checkpoint_dir.h"

namespace mt {

namespace {
nlohmann::json moe_signature(const MoeConfig& m);
}  // namespace

nlohmann::json model_signature(const ModelConfig& c) {
  nlohmann::json j = {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"ffn_hidden_size", c.ffn_hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_query_groups", c.num_query_groups},
          {"kv_channels", c.kv_channels},
          {"max_position_embeddings", c.max_position_embeddings},
          {"position_embedding_type", static_cast<int>(c.position_embedding_type)},
          {"normalization", static_cast<int>(c.normalization)},
          {"activation", static_cast<int>(c.activation)},
          {"add_bias_linear", c.add_bias_linear},
          {"untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights},
          {"vocab_size", c.vocab_size}};
  if (c.moe.enabled()) j["moe"] = moe_signature(c.moe);
  if (c.layernorm_zero_centered_gamma) j["layernorm_zero_centered_gamma"] = true;  // absent: as before
  if (c.qk_layernorm) j["qk_layernorm"] = true;
  return j;
}

namespace {

// An MoE model's tensors: which layers hold experts, how many, and their widths (absent when dense,
// so dense checkpoints read as before).
nlohmann::json moe_signature(const MoeConfig& m) {
  return {{"num_experts", m.num_experts},
          {"layer_is_moe", m.layer_is_moe},
          {"ffn_hidden_size", m.ffn_hidden_size},
          {"shared_expert_intermediate_size", m.shared_expert_intermediate_size}};
}

// ... and what routes tokens without changing the tensors.
nlohmann::json moe_routing(const MoeConfig& m) {
  const MoeRouterOptions& r = m.router;
  nlohmann::json j = {{"topk", r.topk},
                      {"score_function", static_cast<int>(r.score_function)},
                      {"pre_softmax", r.pre_softmax},
                      {"num_groups", r.num_groups},
                      {"group_topk", r.group_topk},
                      {"scaling_factor", r.scaling_factor},
                      {"router_fp32", m.router_fp32},
                      {"pad_to_capacity", m.capacity.pad_to_capacity},
                      {"drop_policy", static_cast<int>(m.capacity.drop_policy)}};
  if (m.capacity.capacity_factor) j["capacity_factor"] = *m.capacity.capacity_factor;
  if (r.sinkhorn) j["sinkhorn"] = true;  // absent otherwise, as in records written before it existed
  if (m.expert_bias) j["expert_bias"] = true;  // likewise
  return j;
}

void apply_moe_record(const nlohmann::json& j, const nlohmann::json* routing, MoeConfig& m) {
  m.num_experts = j.at("num_experts").get<int64_t>();
  std::string freq = "[";
  for (const int moe : j.at("layer_is_moe").get<std::vector<int>>()) freq += (freq.size() > 1 ? "," : "") + std::to_string(moe);
  m.layer_freq = freq + "]";
  m.ffn_hidden_size = j.at("ffn_hidden_size").get<int64_t>();
  m.shared_expert_intermediate_size = j.at("shared_expert_intermediate_size").get<int64_t>();
  if (routing == nullptr) return;
  const nlohmann::json& r = *routing;
  m.router.topk = r.at("topk").get<int64_t>();
  m.router.score_function = static_cast<MoeScoreFunction>(r.at("score_function").get<int>());
  m.router.pre_softmax = r.at("pre_softmax").get<bool>();
  m.router.num_groups = r.at("num_groups").get<int64_t>();
  m.router.group_topk = r.at("group_topk").get<int64_t>();
  m.router.scaling_factor = r.at("scaling_factor").get<float>();
  m.router_fp32 = r.at("router_fp32").get<bool>();
  m.capacity.pad_to_capacity = r.at("pad_to_capacity").get<bool>();
  m.capacity.drop_policy = static_cast<MoeDropPolicy>(r.at("drop_policy").get<int>());
  m.expert_bias = r.value("expert_bias", false);
  m.capacity.capacity_factor.reset();
  if (r.contains("capacity_factor")) m.capacity.capacity_factor = r.at("capacity_factor").get<double>();
  // Sinkhorn is a routing (evaluation takes the top-k of σ or softmax), the other types only losses.
  if (r.value("sinkhorn", false))
    m.load_balancing = MoeLoadBalancing::sinkhorn;
  else if (m.load_balancing == MoeLoadBalancing::sinkhorn)
    m.load_balancing = MoeLoadBalancing::none;
}

}  // namespace

nlohmann::json model_record(const ModelConfig& c) {
  nlohmann::json r = model_signature(c);
  r["norm_epsilon"] = c.norm_epsilon;
  r["rotary_base"] = c.rotary_base;
  r["rotary_percent"] = c.rotary_percent;
  r["rotary_interleaved"] = c.rotary_interleaved;
  if (c.moe.enabled()) r["moe_routing"] = moe_routing(c.moe);
  return r;
}

nlohmann::json read_checkpoint_manifest(const std::string& root, std::optional<int64_t> step, std::string& dir) {
  if (!step) step = read_latest_iteration(root);
  MT_CHECK(step) << root << " holds no checkpoint (no latest_checkpointed_iteration.txt)";
  dir = committed_iteration_dir(root, *step);
  return read_manifest(dir);
}

void apply_checkpoint_args(const std::string& root, std::optional<int64_t> step, ModelConfig& c) {
  std::string dir;
  const nlohmann::json manifest = read_checkpoint_manifest(root, step, dir);
  MT_CHECK(manifest.contains("model")) << dir << "/manifest.json records no model";
  apply_model_record(manifest.at("model"), dir + "/manifest.json", c);
}

void apply_model_record(const nlohmann::json& m, const std::string& where, ModelConfig& c) {
  try {
    c.num_layers = m.at("num_layers").get<int64_t>();
    c.hidden_size = m.at("hidden_size").get<int64_t>();
    c.ffn_hidden_size = m.at("ffn_hidden_size").get<int64_t>();
    c.num_attention_heads = m.at("num_attention_heads").get<int64_t>();
    c.num_query_groups = m.at("num_query_groups").get<int64_t>();
    c.kv_channels = m.at("kv_channels").get<int64_t>();
    c.max_position_embeddings = m.at("max_position_embeddings").get<int64_t>();
    c.position_embedding_type = static_cast<PositionEmbedding>(m.at("position_embedding_type").get<int>());
    c.normalization = static_cast<Normalization>(m.at("normalization").get<int>());
    c.activation = static_cast<Activation>(m.at("activation").get<int>());
    c.add_bias_linear = m.at("add_bias_linear").get<bool>();
    c.untie_embeddings_and_output_weights = m.at("untie_embeddings_and_output_weights").get<bool>();
    c.vocab_size = m.at("vocab_size").get<int64_t>();
    if (m.contains("norm_epsilon")) c.norm_epsilon = m.at("norm_epsilon").get<float>();
    c.layernorm_zero_centered_gamma = m.value("layernorm_zero_centered_gamma", false);
    c.qk_layernorm = m.value("qk_layernorm", false);
    if (m.contains("rotary_base")) c.rotary_base = m.at("rotary_base").get<double>();
    // Checkpoints written before --rotary-percent and --rotary-interleaved existed rotated whole heads
    // in the rotate-half form.
    c.rotary_percent = m.contains("rotary_percent") ? m.at("rotary_percent").get<double>() : 1.0;
    c.rotary_interleaved = m.contains("rotary_interleaved") && m.at("rotary_interleaved").get<bool>();
    if (m.contains("moe"))
      apply_moe_record(m.at("moe"), m.contains("moe_routing") ? &m.at("moe_routing") : nullptr,
                       c.moe);  // the rest of c.moe (losses, dispatcher, ...) stays the command line's
    else
      c.moe.num_experts = 0;
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << where << ": its model section is incomplete: " << e.what();
  }
}

}  // namespace mt
