#include "train/checkpoint_args.h"

#include "base/error.h"
#include "ckpt/checkpoint_dir.h"

namespace mt {

nlohmann::json model_signature(const ModelConfig& c) {
  return {{"num_layers", c.num_layers},
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
}

nlohmann::json model_record(const ModelConfig& c) {
  nlohmann::json r = model_signature(c);
  r["norm_epsilon"] = c.norm_epsilon;
  r["rotary_base"] = c.rotary_base;
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
    if (m.contains("rotary_base")) c.rotary_base = m.at("rotary_base").get<double>();
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << where << ": its model section is incomplete: " << e.what();
  }
}

}  // namespace mt
