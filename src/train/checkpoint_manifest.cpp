#include "train/checkpoint_manifest.h"

#include <cmath>

#include "base/error.h"

namespace mt {

std::string shard_file_name(int world_rank) { return "rank_" + std::to_string(world_rank) + ".safetensors"; }

namespace {

// Megatron's OptimizerParamScheduler.state_dict fields, in steps (samples), plus WSD's.
nlohmann::json lr_schedule_json(const LrScheduleConfig& c) {
  nlohmann::json j = {{"max_lr", c.max_lr},
                      {"min_lr", c.min_lr},
                      {"lr_warmup_init", c.lr_warmup_init},
                      {"lr_warmup_steps", c.lr_warmup_steps},
                      {"lr_decay_steps", c.lr_decay_steps},
                      {"lr_decay_style", std::string(to_string(c.lr_decay_style))},
                      {"lr_wsd_decay_style", std::string(to_string(c.lr_wsd_decay_style))},
                      {"start_wd", c.start_wd},
                      {"end_wd", c.end_wd},
                      {"wd_incr_steps", c.wd_incr_steps},
                      {"wd_incr_style", std::string(to_string(c.wd_incr_style))}};
  if (c.wsd_decay_steps) j["wsd_decay_steps"] = *c.wsd_decay_steps;
  return j;
}

}  // namespace

nlohmann::json manifest_json(const CheckpointManifest& m) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, digest] : m.files) files[name] = {{"bytes", digest.bytes}, {"checksum", digest.checksum}};
  const CheckpointLayout& l = m.layout;
  nlohmann::json j = {
      {"iteration", m.iteration},
      {"consumed_train_samples", m.consumed_train},
      {"consumed_valid_samples", m.consumed_valid},
      {"model", m.model},
      {"params_dtype", std::string(dtype_name(m.params_dtype))},
      {"layout", {{"world_size", l.world_size}, {"tp", l.tp}, {"pp", l.pp}, {"vp", l.vp}, {"dp", l.dp},
                  {"distributed_optimizer", l.distributed_optimizer}}},
      {"optimizer", {{"saved", m.optimizer_saved}, {"steps", m.optimizer_steps}}},
      {"scheduler", {{"num_steps", m.scheduler_steps}}},
      {"loss_scaler", {{"scale", m.scaler.scale}, {"growth_tracker", m.scaler.growth_tracker},
                       {"hysteresis_tracker", m.scaler.hysteresis_tracker}}},
      {"files", files}};
  if (m.schedule) j["scheduler"]["config"] = lr_schedule_json(*m.schedule);
  if (m.seed) j["rng"] = {{"seed", *m.seed}};
  if (!m.tokenizer.is_null()) j["tokenizer"] = m.tokenizer;
  return j;
}


namespace {

DType dtype_named(const std::string& name, const std::string& dir) {
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    if (dtype_name(d) == name) return d;
  MT_FAIL() << dir << "/manifest.json: params_dtype \"" << name << "\" is not f32, bf16 or f16";
}

bool is_shard_file_name(const std::string& name) {
  return name.rfind("rank_", 0) == 0 && name.find('/') == std::string::npos && name.size() > 17 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

}  // namespace

CheckpointManifest parse_manifest(const nlohmann::json& j, const std::string& dir) {
  CheckpointManifest m;
  try {
    m.iteration = j.at("iteration").get<int64_t>();
    m.consumed_train = j.at("consumed_train_samples").get<int64_t>();
    m.consumed_valid = j.at("consumed_valid_samples").get<int64_t>();
    m.model = j.contains("model") ? j.at("model") : nlohmann::json::object();
    if (j.contains("params_dtype")) m.params_dtype = dtype_named(j.at("params_dtype").get<std::string>(), dir);
    if (j.contains("layout")) {
      const nlohmann::json& l = j.at("layout");
      m.layout = {l.at("world_size").get<int>(), l.at("tp").get<int>(), l.at("pp").get<int>(),
                  l.at("vp").get<int>(),         l.at("dp").get<int>(), l.at("distributed_optimizer").get<bool>()};
    }
    m.optimizer_saved = j.at("optimizer").at("saved").get<bool>();
    m.optimizer_steps = j.at("optimizer").at("steps").get<int64_t>();
    m.scheduler_steps = j.at("scheduler").at("num_steps").get<int64_t>();
    if (j.at("scheduler").contains("config")) {
      const nlohmann::json& c = j.at("scheduler").at("config");
      LrScheduleConfig s;
      s.max_lr = c.at("max_lr").get<double>();
      s.min_lr = c.at("min_lr").get<double>();
      s.lr_warmup_init = c.at("lr_warmup_init").get<double>();
      s.lr_warmup_steps = c.at("lr_warmup_steps").get<double>();
      s.lr_decay_steps = c.at("lr_decay_steps").get<int64_t>();
      s.lr_decay_style = parse_lr_decay_style(c.at("lr_decay_style").get<std::string>());
      s.lr_wsd_decay_style = parse_wsd_decay_style(c.at("lr_wsd_decay_style").get<std::string>());
      if (c.contains("wsd_decay_steps")) s.wsd_decay_steps = c.at("wsd_decay_steps").get<int64_t>();
      s.start_wd = c.at("start_wd").get<double>();
      s.end_wd = c.at("end_wd").get<double>();
      s.wd_incr_steps = c.at("wd_incr_steps").get<int64_t>();
      s.wd_incr_style = parse_wd_incr_style(c.at("wd_incr_style").get<std::string>());
      m.schedule = s;
    }
    const nlohmann::json& ls = j.at("loss_scaler");
    m.scaler = {ls.at("scale").get<float>(), ls.at("growth_tracker").get<int64_t>(),
                ls.at("hysteresis_tracker").get<int64_t>()};
    if (j.contains("rng")) m.seed = j.at("rng").at("seed").get<uint64_t>();
    if (j.contains("tokenizer")) m.tokenizer = j.at("tokenizer");
    for (auto it = j.at("files").begin(); it != j.at("files").end(); ++it)
      m.files.push_back({it.key(), {it->at("bytes").get<uint64_t>(), it->at("checksum").get<uint64_t>()}});
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << dir << "/manifest.json is malformed: " << e.what();
  }
  MT_CHECK(m.iteration >= 0 && m.consumed_train >= 0 && m.consumed_valid >= 0 && m.optimizer_steps >= 0 &&
           m.scheduler_steps >= 0 && std::isfinite(m.scaler.scale) && m.scaler.scale > 0.0f)
      << dir << "/manifest.json holds an impossible state (a negative count or a bad loss scale)";
  for (const auto& [name, digest] : m.files)
    MT_CHECK(is_shard_file_name(name)) << dir << "/manifest.json lists \"" << name << "\", not a shard file of this format";
  return m;
}

}  // namespace mt
