#include "train/checkpoint_convert.h"

#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "base/error.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/safetensors.h"
#include "model/hf_format.h"
#include "model/params.h"
#include "ops/elementwise.h"
#include "pipeline/partition.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_reader.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

// A model's whole tensors by kind ("param", "exp_avg", ...) and Megatron name, one at a time.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The model, finalized at tensor-parallel size 1.
  const ModelConfig& config() const { return config_; }
  DType params_dtype() const { return state_.params_dtype; }
  // The training state to carry over (iteration, schedule, ...); model, layout and files unset.
  const CheckpointManifest& state() const { return state_; }
  // What a checkpoint's manifest records of the model (checkpoint_args.h's model_record).
  virtual nlohmann::json record() const { return model_record(config_); }
  virtual bool has(const std::string& kind, const std::string& name) = 0;
  // The whole tensor in f32 and its shape: p.shape, except that a vocabulary tensor may have
  // other (padding) rows. Valid until the next call.
  virtual const std::vector<float>& whole(const std::string& kind, const ParamSpec& p, Shape& shape) = 0;
  // Called once every tensor was read: mt::Error for what the source holds and nothing read.
  virtual void check_all_read() {}

 protected:
  ModelConfig config_;
  CheckpointManifest state_;
};

class MegatronSource : public TensorSource {
 public:
  MegatronSource(const std::string& root, std::optional<int64_t> step) : reader_(root, step) {
    state_ = reader_.manifest();
    apply_model_record(state_.model, reader_.dir() + "/manifest.json", config_);
    config_.seq_length = config_.max_position_embeddings;
    config_.params_dtype = state_.params_dtype;
    config_.finalize();
  }
  nlohmann::json record() const override { return state_.model; }  // as saved, nothing filled in
  bool has(const std::string& kind, const std::string& name) override { return reader_.has(kind, name); }
  const std::vector<float>& whole(const std::string& kind, const ParamSpec& p, Shape& shape) override {
    return reader_.whole(kind, p.name, p.shape, shape);
  }

 private:
  CheckpointReader reader_;
};

// A Hugging Face model directory: config.json and model.safetensors, or the shards that
// model.safetensors.index.json names.
class HfSource : public TensorSource {
 public:
  explicit HfSource(const std::string& dir) {
    const std::string config_path = (fs::path(dir) / "config.json").string();
    const nlohmann::json config = read_json_file(config_path);
    config_ = model_config_from_hf(config, config_path);
    config_.finalize();
    hf_architecture_of(config_);  // what export could not write back is refused on import too
    const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
    std::set<std::string> names;
    if (!fs::exists(single) && fs::exists(index)) {  // transformers' preference too
      const nlohmann::json map = read_json_file(index.string());
      MT_CHECK(map.contains("weight_map") && map.at("weight_map").is_object()) << index.string() << " has no weight_map";
      for (auto it = map.at("weight_map").begin(); it != map.at("weight_map").end(); ++it) {
        MT_CHECK(it->is_string()) << index.string() << ": the file of " << it.key() << " is not a string";
        names.insert(it->get<std::string>());
      }
    } else {
      MT_CHECK(fs::exists(single)) << dir << " holds neither model.safetensors nor model.safetensors.index.json";
      names.insert("model.safetensors");
    }
    for (const std::string& name : names) {
      MT_CHECK(name.find('/') == std::string::npos) << index.string() << " names a file outside " << dir << ": " << name;
      files_.push_back(SafetensorsFile::load((fs::path(dir) / name).string()));
      for (const std::string& t : files_.back().names()) {
        MT_CHECK(!where_.count(full_name(t))) << dir << ": tensor " << t << " is in two files";
        where_[full_name(t)] = {files_.size() - 1, t};
        paths_[t] = (fs::path(dir) / name).string();
      }
    }
    // The word embedding's dtype is the model's (config.json's torch_dtype may be absent or stale).
    const auto embedding = where_.find(HfParamMap(config_, "embedding.word_embeddings.weight", {1, 1}).hf_tensors()[0].name);
    state_.params_dtype = embedding == where_.end() ? hf_torch_dtype(config)
                                                    : files_[embedding->second.first].get(embedding->second.second).dtype;
    MT_CHECK(state_.params_dtype == DType::f32 || state_.params_dtype == DType::bf16 || state_.params_dtype == DType::f16)
        << dir << ": tensors of dtype " << dtype_name(state_.params_dtype) << " (f32, bf16 or f16 import)";
    config_.params_dtype = state_.params_dtype;
  }

  bool has(const std::string& kind, const std::string& name) override { return kind == "param"; }

  const std::vector<float>& whole(const std::string& kind, const ParamSpec& p, Shape& shape) override {
    const HfParamMap map(config_, p.name, p.shape);
    std::vector<const float*> inputs;
    parts_.resize(map.hf_tensors().size());
    for (size_t i = 0; i < map.hf_tensors().size(); ++i) {
      const HfTensor& want = map.hf_tensors()[i];
      const auto it = where_.find(want.name);
      MT_CHECK(it != where_.end()) << "the Hugging Face model lacks tensor " << want.name << " (for " << p.name << ")";
      const std::string& stored = it->second.second;
      const std::string& path = paths_.at(stored);
      const TensorView t = files_[it->second.first].get(stored);
      MT_CHECK(t.shape == want.shape) << path << ": tensor " << stored << " has shape " << t.str()
                                      << "; config.json implies " << TensorView(nullptr, t.dtype, want.shape).str();
      MT_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16)
          << path << ": tensor " << stored << " is " << dtype_name(t.dtype) << ", not a float type";
      parts_[i].resize(static_cast<size_t>(t.numel()));
      cast(TensorView(parts_[i].data(), DType::f32, t.shape), t);
      inputs.push_back(parts_[i].data());
      read_.insert(want.name);
    }
    shape = map.megatron_shape();
    whole_.resize(static_cast<size_t>(shape.numel()));
    map.from_hf(inputs, whole_.data(), scratch_);
    return whole_;
  }

  void check_all_read() override {
    for (const auto& [name, place] : where_) {
      if (read_.count(name) || ignorable(name)) continue;
      MT_FAIL() << paths_.at(place.second) << " holds tensor " << place.second << ", which this model has no place "
                << "for (an option megatron.cpp does not implement?); nothing was converted";
    }
  }

 private:
  // Buffers some exports carry beside the weights, and the tied output layer some write twice.
  bool ignorable(const std::string& name) const {
    const auto ends_with = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with(".rotary_emb.inv_freq") ||
           (name == "lm_head.weight" && !config_.untie_embeddings_and_output_weights);
  }

  // Some exports (the original GPT-2's) store the base model's names without its prefix.
  std::string full_name(const std::string& stored) const {
    const std::string base = config_.position_embedding_type == PositionEmbedding::rope ? "model." : "transformer.";
    return stored.rfind(base, 0) == 0 || stored.rfind("lm_head.", 0) == 0 ? stored : base + stored;
  }

  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, std::string>> where_;  // full name -> (file index, stored name)
  std::map<std::string, std::string> paths_;                     // stored name -> its file
  std::set<std::string> read_;
  std::vector<std::vector<float>> parts_;
  std::vector<float> whole_, scratch_;
};

std::unique_ptr<TensorSource> open_source(const ConvertOptions& o) {
  if (o.loader == "hf") return std::make_unique<HfSource>(o.load_dir);
  return std::make_unique<MegatronSource>(o.load_dir, o.ckpt_step);
}

// Host memory for tensors being written, kept until the file is.
TensorView host_tensor(std::deque<std::vector<uint8_t>>& storage, DType dtype, const Shape& shape) {
  storage.emplace_back(static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  return TensorView(storage.back().data(), dtype, shape);
}

int64_t count_parameters(const ModelConfig& c) {
  int64_t n = 0;
  for (const ParamSpec& p : param_specs(c, StageRange::whole(c))) {
    n += is_vocabulary_param(p.name) ? c.vocab_size * c.hidden_size : p.shape.numel();
  }
  return n;
}

ConvertSummary save_hf(TensorSource& source, const std::string& dir) {
  const ModelConfig& c = source.config();
  const DType dtype = source.params_dtype();
  const nlohmann::json config = hf_config(c, dtype);  // refuses what HF cannot hold, before any writing
  MT_CHECK(source.record().contains("norm_epsilon") && source.record().contains("rotary_base"))
      << "the checkpoint does not record its norm epsilon and RoPE base (an older megatron.cpp saved it); resume it "
      << "for one iteration with this version (--load, --save, and its --norm-epsilon and --rotary-base), then convert";
  MT_CHECK(!fs::exists(fs::path(dir) / "model.safetensors.index.json"))
      << dir << " holds a sharded model (model.safetensors.index.json); export into an empty directory";
  std::deque<std::vector<uint8_t>> storage;
  std::vector<std::pair<std::string, TensorView>> tensors;
  std::vector<std::vector<float>> parts;
  std::vector<float> scratch;
  for (const ParamSpec& p : param_specs(c, StageRange::whole(c))) {
    Shape shape;
    const std::vector<float>& whole = source.whole("param", p, shape);
    const HfParamMap map(c, p.name, p.shape);
    MT_CHECK(shape.ndim == map.megatron_shape().ndim && shape.numel() >= map.megatron_shape().numel())
        << p.name << " holds fewer elements than the model needs";
    std::vector<float*> outputs;
    parts.resize(map.hf_tensors().size());
    for (size_t i = 0; i < parts.size(); ++i) {
      parts[i].resize(static_cast<size_t>(map.hf_tensors()[i].shape.numel()));
      outputs.push_back(parts[i].data());
    }
    map.to_hf(whole.data(), outputs, scratch);
    for (size_t i = 0; i < parts.size(); ++i) {
      const HfTensor& t = map.hf_tensors()[i];
      const TensorView out = host_tensor(storage, dtype, t.shape);
      cast(out, TensorView(parts[i].data(), DType::f32, t.shape));
      tensors.push_back({t.name, out});
    }
  }
  source.check_all_read();
  fs::create_directories(dir);
  save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_file_atomically((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  return {std::string("Hugging Face ") + hf_architecture_name(hf_architecture_of(c)) + " (" +
              std::string(dtype_name(dtype)) + ") in " + dir,
          static_cast<int64_t>(tensors.size()), count_parameters(c)};
}

// Writes the pieces of every (pipeline stage, tensor-parallel rank) of the layout into staging,
// one file per rank (world rank in Megatron's order: tp fastest, then pp); returns the records.
int64_t write_shards(TensorSource& source, const ModelConfig& c, const PipelinePartition& partition,
                     const std::string& staging, std::vector<std::pair<std::string, FileDigest>>& files) {
  const int tp = static_cast<int>(c.tensor_model_parallel_size);
  int64_t written = 0;
  for (int stage = 0; stage < partition.pp; ++stage) {
    const ChunkLayers& layers = partition.stages[stage];
    const StageRange range{layers.first_layer, layers.last_layer, layers.embedding, layers.head};
    std::deque<std::vector<uint8_t>> storage;
    std::vector<std::vector<TensorRecord>> records(tp);
    for (const ParamSpec& p : param_specs(c, range)) {
      if (p.shared_embedding && !range.embedding) continue;  // the first stage saves the tied embedding
      for (const char* kind : {"param", "exp_avg", "exp_avg_sq", "momentum_buffer", "main_param"}) {
        if (kind != std::string("param") && !source.has(kind, p.name)) continue;  // a missing weight is an error
        Shape shape;
        const std::vector<float>& whole = source.whole(kind, p, shape);
        const Shape local = p.shard.sharded() ? shard_shape(p.shape, p.shard, tp) : p.shape;
        for (int rank = 0; rank < (p.shard.sharded() ? tp : 1); ++rank) {  // a whole tensor from rank 0 only
          const DType dtype = kind == std::string("param") ? c.params_dtype : DType::f32;
          const TensorView data = host_tensor(storage, dtype, {local.numel()});
          take_piece(whole, shape, p.shape, p.shard, tp, rank, 0, data, p.name);
          records[rank].push_back(tensor_piece(p.name, kind, p.shape, p.shard, rank, tp, 0, data));
        }
      }
    }
    for (int rank = 0; rank < tp; ++rank) {
      const std::string name = shard_file_name(stage * tp + rank);
      files.push_back({name, write_shard_file((fs::path(staging) / name).string(), records[rank])});
      written += static_cast<int64_t>(records[rank].size());
    }
  }
  return written;
}

ConvertSummary save_megatron(TensorSource& source, const std::string& root, int tp, int pp) {
  ModelConfig c = source.config();
  c.tensor_model_parallel_size = tp;
  c.finalize();  // refuses a tp that does not divide heads, groups or the MLP
  PartitionConfig partition_config;
  partition_config.pp = pp;
  partition_config.num_layers = c.num_layers;
  const PipelinePartition partition = partition_layers(partition_config);
  CheckpointManifest m = source.state();
  m.model = source.record();
  m.params_dtype = c.params_dtype;
  m.layout = {tp * pp, tp, pp, 1, 1, false};
  m.files.clear();
  fs::create_directories(root);
  begin_checkpoint(root, m.iteration);
  const std::string staging = staging_dir(root, m.iteration);
  int64_t written = 0;
  try {
    written = write_shards(source, c, partition, staging, m.files);
    source.check_all_read();
  } catch (...) {  // nothing half-converted stays behind
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  write_manifest(staging, manifest_json(m));
  commit_checkpoint(root, m.iteration);
  return {"megatron.cpp checkpoint (tp " + std::to_string(tp) + ", pp " + std::to_string(pp) + ", " +
              std::string(dtype_name(c.params_dtype)) + (m.optimizer_saved ? ", with optimizer state" : "") +
              ") in " + iteration_dir(root, m.iteration),
          written, count_parameters(c)};
}

}  // namespace

ConvertSummary convert_checkpoint(const ConvertOptions& o) {
  for (const std::string* side : {&o.loader, &o.saver})
    MT_CHECK(*side == "megatron" || *side == "hf") << "--loader and --saver are megatron or hf, not \"" << *side << "\"";
  MT_CHECK(!o.load_dir.empty() && !o.save_dir.empty()) << "convert needs --load-dir and --save-dir";
  MT_CHECK(!(o.loader == "hf" && o.saver == "hf")) << "--loader hf --saver hf converts nothing";
  MT_CHECK(fs::exists(o.load_dir)) << "--load-dir " << o.load_dir << " does not exist";
  std::error_code same_error;
  MT_CHECK(!fs::exists(o.save_dir) || !fs::equivalent(o.load_dir, o.save_dir, same_error))
      << "--save-dir must differ from --load-dir (" << o.load_dir << ")";
  MT_CHECK(o.target_tp >= 1 && o.target_pp >= 1) << "--target-tensor-parallel-size and "
                                                  << "--target-pipeline-parallel-size must be at least 1";
  const std::unique_ptr<TensorSource> source = open_source(o);
  if (o.saver == "hf") return save_hf(*source, o.save_dir);
  return save_megatron(*source, o.save_dir, o.target_tp, o.target_pp);
}

}  // namespace mt
