// Owns Trainer::save_checkpoint and Trainer::load_checkpoint (see trainer.h): which pieces each
// rank writes, the manifest, and restoring any layout's checkpoint through the resharding map
// (train/checkpoint_tensors.h).
//
// Pieces: every parameter's values once per tensor-parallel shard (data-parallel rank 0; a tensor
// every tp rank holds whole from tp rank 0 only; never the last stage's copy of the tied
// embedding), and the optimizer state where it lives: with the distributed optimizer each dp rank
// its own ranges, otherwise dp rank 0. Files are named by world rank; the manifest lists each
// with its size and checksum.
#include <cmath>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_tensors.h"
#include "train/trainer.h"

namespace mt {

namespace {

std::string file_name(int world_rank) { return "rank_" + std::to_string(world_rank) + ".safetensors"; }

TensorRecord piece(const Param& p, const char* kind, int tp_rank, int tp_size, int64_t begin, const TensorView& data) {
  TensorRecord r;
  r.name = p.name;
  r.kind = kind;
  r.global_shape = p.full_shape;
  r.shard_dim = p.shard.dim;
  r.shard_groups = static_cast<int>(p.shard.blocks);
  r.tp_rank = tp_rank;
  r.tp_size = tp_size;
  r.begin = begin;
  r.end = begin + data.numel();
  r.data = data;
  return r;
}

TensorView flat(const TensorView& t) { return t.reshape({t.numel()}); }

// What the manifest records besides the model, read and checked before anything is restored.
struct SavedState {
  int64_t iteration = 0, consumed_train = 0, consumed_valid = 0, optimizer_steps = 0, scheduler_steps = 0;
  bool optimizer_saved = false;
  LossScalerState scaler;
  std::optional<uint64_t> seed;
  std::vector<std::pair<std::string, FileDigest>> files;
};

SavedState read_state(const nlohmann::json& m, const std::string& dir) {
  SavedState s;
  try {
    s.iteration = m.at("iteration").get<int64_t>();
    s.consumed_train = m.at("consumed_train_samples").get<int64_t>();
    s.consumed_valid = m.at("consumed_valid_samples").get<int64_t>();
    s.optimizer_saved = m.at("optimizer").at("saved").get<bool>();
    s.optimizer_steps = m.at("optimizer").at("steps").get<int64_t>();
    s.scheduler_steps = m.at("scheduler").at("num_steps").get<int64_t>();
    const nlohmann::json& ls = m.at("loss_scaler");
    s.scaler = {ls.at("scale").get<float>(), ls.at("growth_tracker").get<int64_t>(),
                ls.at("hysteresis_tracker").get<int64_t>()};
    if (m.contains("rng")) s.seed = m.at("rng").at("seed").get<uint64_t>();
    for (auto it = m.at("files").begin(); it != m.at("files").end(); ++it)
      s.files.push_back({it.key(), {it->at("bytes").get<uint64_t>(), it->at("checksum").get<uint64_t>()}});
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << dir << "/manifest.json is malformed: " << e.what();
  }
  MT_CHECK(s.iteration >= 0 && s.consumed_train >= 0 && s.consumed_valid >= 0 && s.optimizer_steps >= 0 &&
           s.scheduler_steps >= 0 && std::isfinite(s.scaler.scale) && s.scaler.scale > 0.0f)
      << dir << "/manifest.json holds an impossible state (a negative count or a bad loss scale)";
  for (const auto& [name, digest] : s.files) {
    const bool shard_name = name.rfind("rank_", 0) == 0 && name.find('/') == std::string::npos &&
                            name.size() > 17 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    MT_CHECK(shard_name) << dir << "/manifest.json lists \"" << name << "\", not a shard file of this format";
  }
  return s;
}

}  // namespace

void Trainer::save_checkpoint(const std::string& root) {
  for (auto& sync : dp_syncs_) sync->finish_param_gather();  // whole parameters on every rank
  Communicator& world = *groups_.world;
  const int tp_rank = groups_.tp->rank(), tp = groups_.tp->size(), dp_rank = groups_.dp->rank();
  const bool with_optimizer = !config_.checkpoint.no_save_optim;
  if (world.rank() == 0) begin_checkpoint(root, iteration_);
  world.barrier();
  std::vector<TensorRecord> records;
  for (auto& stage : chunks_)
    for (const Param& p : stage->params().params()) {
      if (!is_counted_copy(p, tp_rank)) continue;  // another rank saves the same values
      if (dp_rank == 0) records.push_back(piece(p, "param", tp_rank, tp, 0, flat(p.value)));
    }
  if (with_optimizer)
    for (const AdamW::Segment& s : optimizer_->segments()) {
      const Param& p = *s.param;
      if (!is_counted_copy(p, tp_rank)) continue;
      if (!config_.use_distributed_optimizer && dp_rank != 0) continue;  // replicas
      records.push_back(piece(p, "exp_avg", tp_rank, tp, s.begin, s.m));
      records.push_back(piece(p, "exp_avg_sq", tp_rank, tp, s.begin, s.v));
      if (!s.main.empty()) records.push_back(piece(p, "main_param", tp_rank, tp, s.begin, s.main));
    }
  const std::string staging = staging_dir(root, iteration_);
  const FileDigest mine = write_shard_file((std::filesystem::path(staging) / file_name(world.rank())).string(), records);
  // Every file's size and checksum to rank 0, for the manifest.
  std::vector<int64_t> digests(2 * static_cast<size_t>(world.size()));
  const int64_t own[2] = {static_cast<int64_t>(mine.bytes), static_cast<int64_t>(mine.checksum)};
  world.all_gather(TensorView(digests.data(), DType::f64, {2 * static_cast<int64_t>(world.size())}),
                   TensorView(const_cast<int64_t*>(own), DType::f64, {2}));
  if (world.rank() == 0) {
    nlohmann::json files = nlohmann::json::object();
    for (int r = 0; r < world.size(); ++r)
      files[file_name(r)] = {{"bytes", static_cast<uint64_t>(digests[2 * r])},
                             {"checksum", static_cast<uint64_t>(digests[2 * r + 1])}};
    const LossScalerState scaler = scaler_ ? scaler_->state() : LossScalerState{};
    nlohmann::json manifest = {
        {"iteration", iteration_},
        {"consumed_train_samples", consumed_train_samples_},
        {"consumed_valid_samples", valid_sampler_ ? valid_sampler_->consumed() : 0},
        {"model", model_signature(model_config_)},
        {"params_dtype", std::string(dtype_name(model_config_.params_dtype))},
        {"layout", {{"world_size", world.size()}, {"tp", tp}, {"pp", groups_.grid.pp()}, {"vp", chunks()},
                    {"dp", groups_.grid.dp()}, {"distributed_optimizer", config_.use_distributed_optimizer}}},
        {"optimizer", {{"saved", with_optimizer}, {"steps", optimizer_->steps()}}},
        {"scheduler", {{"num_steps", scheduler_->num_steps()}}},
        {"loss_scaler", {{"scale", scaler.scale}, {"growth_tracker", scaler.growth_tracker},
                         {"hysteresis_tracker", scaler.hysteresis_tracker}}},
        {"files", files}};
    if (!config_.checkpoint.no_save_rng) manifest["rng"] = {{"seed", config_.seed}};
    write_manifest(staging, manifest);
    commit_checkpoint(root, iteration_);
  }
  world.barrier();  // nobody goes on (or exits) before the checkpoint is in place
}

int64_t Trainer::load_checkpoint(const std::string& root) {
  const CheckpointConfig& flags = config_.checkpoint;
  if (!flags.ckpt_step && !read_latest_iteration(root)) {
    MT_CHECK(!flags.exit_on_missing_checkpoint)
        << "--load " << root << " holds no checkpoint (no latest_checkpointed_iteration.txt) and "
        << "--exit-on-missing-checkpoint is set";
    return -1;
  }
  std::string dir;
  const nlohmann::json manifest = read_checkpoint_manifest(root, flags.ckpt_step, dir);
  const SavedState saved_state = read_state(manifest, dir);
  const nlohmann::json expected = model_signature(model_config_);
  const nlohmann::json saved = manifest.contains("model") ? manifest.at("model") : nlohmann::json::object();
  for (auto it = expected.begin(); it != expected.end(); ++it)
    MT_CHECK(saved.contains(it.key()) && saved.at(it.key()) == it.value())
        << "checkpoint " << dir << " is of another model: its " << it.key() << " is "
        << (saved.contains(it.key()) ? saved.at(it.key()).dump() : "absent") << ", this run's " << it.value().dump();
  std::vector<ShardFile> files;
  for (const auto& [name, digest] : saved_state.files)
    files.push_back(ShardFile::load((std::filesystem::path(dir) / name).string(), digest));
  CheckpointTensors tensors(std::move(files));
  const int tp_rank = groups_.tp->rank(), tp = groups_.tp->size();

  // Weights: every parameter this rank holds (the tied copy from the embedding's pieces).
  for (auto& stage : chunks_)
    for (const Param& p : stage->params().params()) {
      Shape shape;
      const std::vector<float>& whole = tensors.whole("param", p.name, p.full_shape, shape);
      take_piece(whole, shape, p.full_shape, p.shard, tp, tp_rank, 0, flat(p.value), p.name);
    }
  const bool optimizer = !flags.no_load_optim && !flags.finetune;
  if (optimizer) {
    MT_CHECK(saved_state.optimizer_saved)
        << "checkpoint " << dir << " was saved with --no-save-optim; add --no-load-optim (or --finetune) to load "
        << "its weights alone";
    for (const AdamW::Segment& s : optimizer_->segments()) {
      const Param& p = *s.param;
      Shape shape;
      take_piece(tensors.whole("exp_avg", p.name, p.full_shape, shape), shape, p.full_shape, p.shard, tp, tp_rank, s.begin, s.m,
                 p.name);
      take_piece(tensors.whole("exp_avg_sq", p.name, p.full_shape, shape), shape, p.full_shape, p.shard, tp, tp_rank, s.begin, s.v,
                 p.name);
    }
    optimizer_->set_steps(saved_state.optimizer_steps);
  }
  // The f32 main copies of 16-bit parameters: the saved ones, or (weights only, or a checkpoint of
  // f32 parameters) the values themselves.
  for (const AdamW::Segment& s : optimizer_->segments()) {
    if (s.main.empty()) continue;
    const Param& p = *s.param;
    const char* kind = optimizer && tensors.has("main_param", p.name) ? "main_param" : "param";
    Shape shape;
    take_piece(tensors.whole(kind, p.name, p.full_shape, shape), shape, p.full_shape, p.shard, tp, tp_rank, s.begin, s.main, p.name);
  }
  if (flags.finetune) return saved_state.iteration;  // iteration 0, fresh schedule and scaler
  if (optimizer) {
    scheduler_->set_num_steps(saved_state.scheduler_steps);
    if (scaler_) scaler_->load_state(saved_state.scaler);
  }
  iteration_ = saved_state.iteration;
  consumed_train_samples_ = saved_state.consumed_train;
  train_sampler_ = PretrainingSampler(data_.train->size(), consumed_train_samples_, config_.micro_batch_size,
                                      config_.data_parallel_rank, config_.data_parallel_size);
  if (valid_sampler_)
    valid_sampler_.emplace(data_.valid->size(), saved_state.consumed_valid,
                           config_.micro_batch_size, config_.data_parallel_rank, config_.data_parallel_size);
  if (!flags.no_load_rng && saved_state.seed) {
    config_.seed = *saved_state.seed;
    for (auto& stage : chunks_) stage->set_seed(config_.seed);
  }
  return saved_state.iteration;
}

}  // namespace mt
