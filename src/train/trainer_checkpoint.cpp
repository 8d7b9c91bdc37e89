// Owns Trainer::save_checkpoint and Trainer::load_checkpoint (see trainer.h): which pieces each
// rank writes, the manifest (train/checkpoint_manifest.h), and restoring any layout's checkpoint
// through train/checkpoint_reader.h.
//
// Pieces: every parameter's values once per tensor-parallel shard (data-parallel rank 0; a tensor
// every tp rank holds whole from tp rank 0 only; never the last stage's copy of the tied
// embedding), and the optimizer state where it lives: with the distributed optimizer each dp rank
// of the first optimizer instance its own ranges (the other instances hold copies), otherwise dp
// rank 0. Files are named by world rank; the manifest lists each with its size and checksum.
#include <algorithm>
#include <filesystem>
#include <sstream>

#include "backend/backend.h"
#include "ckpt/checkpoint_dir.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_reader.h"
#include "train/trainer.h"

namespace mt {

namespace {

TensorRecord piece(const Param& p, const char* kind, int64_t begin, const TensorView& data) {
  return tensor_piece(p.name, kind, p.full_shape, p.shard, p.shard_rank, p.shard_size, p.shard_offset + begin, data);
}

TensorView flat(const TensorView& t) { return t.reshape({t.numel()}); }

// The writer reads host memory: device pieces are copied into `storage` (one buffer for the whole
// file, 64-byte aligned pieces) and their records pointed there; host pieces stay in place.
void stage_on_host(std::vector<TensorRecord>& records, std::vector<uint64_t>& storage) {
  const auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  size_t bytes = 0;
  for (const TensorRecord& r : records)
    if (r.data.device != Device::cpu) bytes += aligned(r.data.bytes());
  storage.resize(bytes / 8);
  auto* at = reinterpret_cast<char*>(storage.data());
  for (TensorRecord& r : records) {
    if (r.data.device == Device::cpu) continue;
    backend_for(r.data.device).copy_to_host(at, r.data.data, r.data.bytes());
    r.data = TensorView(at, r.data.dtype, r.data.shape);
    at += aligned(r.data.bytes());
  }
}

}  // namespace

void Trainer::save_checkpoint(const std::string& root) {
  for (DataParallelSync* sync : all_syncs()) sync->finish_param_gather();  // whole parameters on every rank
  Communicator& world = *groups_.world;
  const int tp = groups_.tp->size();
  // A parameter's replicas: its data × context-parallel group (expert-dp for the experts' weights).
  const auto replica_rank = [&](const Param& p) { return (p.expert ? groups_.expert_dp : groups_.dp_cp)->rank(); };
  // The distributed optimizer's state repeats over its instances (the inter groups; none with one).
  const auto state_replica = [&](const Param& p) {
    if (!config_.use_distributed_optimizer) return replica_rank(p);
    const std::unique_ptr<Communicator>& inter = p.expert ? groups_.expert_dp_inter : groups_.dp_inter;
    return inter ? inter->rank() : 0;
  };
  const bool with_optimizer = !config_.checkpoint.no_save_optim;
  if (world.rank() == 0) begin_checkpoint(root, iteration_);
  world.barrier();
  std::vector<TensorRecord> records;
  for (auto& stage : chunks_)
    for (ParamStore* store : stage->param_stores())
      for (const Param& p : store->params()) {
        if (!is_counted_copy(p)) continue;  // another rank saves the same values
        if (replica_rank(p) == 0) records.push_back(piece(p, "param", 0, flat(p.value)));
      }
  // State buffers (MoE expert biases): the same on every rank; the first of each stage saves them.
  if (groups_.tp->rank() == 0 && groups_.dp_cp->rank() == 0)
    for (auto& stage : chunks_)
      for (const auto& [name, bias] : stage->expert_biases())
        records.push_back(tensor_piece(name, "buffer", bias.shape, ShardSpec{}, 0, 1, 0, bias));
  if (with_optimizer)
    for (const Optimizer::Segment& s : optimizer_->segments()) {
      const Param& p = *s.param;
      if (!is_counted_copy(p)) continue;
      if (state_replica(p) != 0) continue;
      if (s.muon) {
        records.push_back(piece(p, "momentum_buffer", s.begin, s.m));
      } else {
        records.push_back(piece(p, "exp_avg", s.begin, s.m));
        records.push_back(piece(p, "exp_avg_sq", s.begin, s.v));
      }
      if (!s.main.empty()) records.push_back(piece(p, "main_param", s.begin, s.main));
    }
  std::vector<uint64_t> host_pieces;
  stage_on_host(records, host_pieces);
  const std::string staging = staging_dir(root, iteration_);
  const FileDigest mine = write_shard_file((std::filesystem::path(staging) / shard_file_name(world.rank())).string(), records);
  // Every file's size and checksum to rank 0, for the manifest.
  std::vector<int64_t> digests(2 * static_cast<size_t>(world.size()));
  const int64_t own[2] = {static_cast<int64_t>(mine.bytes), static_cast<int64_t>(mine.checksum)};
  world.all_gather(TensorView(digests.data(), DType::f64, {2 * static_cast<int64_t>(world.size())}),
                   TensorView(const_cast<int64_t*>(own), DType::f64, {2}));
  if (world.rank() == 0) {
    CheckpointManifest m;
    m.model = model_record(model_config_);
    m.params_dtype = model_config_.params_dtype;
    m.layout = {world.size(), tp, groups_.grid.pp(), static_cast<int>(chunks()), groups_.grid.dp(),
                config_.use_distributed_optimizer};
    m.iteration = iteration_;
    m.consumed_train = consumed_train_samples_;
    m.consumed_valid = valid_sampler_ ? valid_sampler_->consumed() : 0;
    m.optimizer_saved = with_optimizer;
    m.optimizer_steps = optimizer_->steps();
    m.scheduler_steps = scheduler_->num_steps();
    m.schedule = scheduler_->config();
    if (scaler_) m.scaler = scaler_->state();
    if (!config_.checkpoint.no_save_rng) m.seed = config_.seed;
    m.tokenizer = config_.checkpoint.tokenizer;
    for (int r = 0; r < world.size(); ++r)
      m.files.push_back({shard_file_name(r), {static_cast<uint64_t>(digests[2 * r]), static_cast<uint64_t>(digests[2 * r + 1])}});
    write_manifest(staging, manifest_json(m));
    const std::optional<int64_t> previous = read_latest_iteration(root);
    commit_checkpoint(root, iteration_);
    // --save-retain-interval: the previous checkpoint goes once this one is in place.
    const std::optional<int64_t>& retain = config_.checkpoint.save_retain_interval;
    if (retain && previous && *previous > 0 && *previous != iteration_ && *previous % *retain != 0)
      std::filesystem::remove_all(committed_iteration_dir(root, *previous));
  }
  world.barrier();  // nobody goes on (or exits) before the checkpoint is in place
}

namespace {

// The fields of two schedules that differ, as "name checkpoint → command line" items.
std::string schedule_differences(const LrScheduleConfig& saved, const LrScheduleConfig& flags) {
  std::ostringstream out;
  out.precision(17);
  const auto item = [&](const char* name, const auto& a, const auto& b) {
    if (a == b) return;
    out << (out.tellp() > 0 ? "; " : "") << name << " " << a << " in the checkpoint, " << b << " given";
  };
  item("max_lr (--lr)", saved.max_lr, flags.max_lr);
  item("min_lr (--min-lr)", saved.min_lr, flags.min_lr);
  item("lr_warmup_init (--lr-warmup-init)", saved.lr_warmup_init, flags.lr_warmup_init);
  item("lr_warmup_steps (samples)", saved.lr_warmup_steps, flags.lr_warmup_steps);
  item("lr_decay_steps (samples; --lr-decay-iters, default --train-iters)", saved.lr_decay_steps, flags.lr_decay_steps);
  item("lr_decay_style", to_string(saved.lr_decay_style), to_string(flags.lr_decay_style));
  item("wsd_decay_steps (samples)", saved.wsd_decay_steps.value_or(-1), flags.wsd_decay_steps.value_or(-1));
  item("lr_wsd_decay_style", to_string(saved.lr_wsd_decay_style), to_string(flags.lr_wsd_decay_style));
  item("start_wd", saved.start_wd, flags.start_wd);
  item("end_wd", saved.end_wd, flags.end_wd);
  item("wd_incr_steps (samples; --train-iters)", saved.wd_incr_steps, flags.wd_incr_steps);
  item("wd_incr_style", to_string(saved.wd_incr_style), to_string(flags.wd_incr_style));
  return out.str();
}

}  // namespace

// Megatron's OptimizerParamScheduler.load_state_dict: the schedule of a resumed run is the
// checkpoint's unless told otherwise, so a changed --train-iters cannot silently move it.
void Trainer::resume_schedule(const CheckpointManifest& saved, const std::string& dir) {
  const ScheduleOnResume mode = config_.checkpoint.schedule_on_resume;
  if (mode == ScheduleOnResume::from_flags) return;
  if (!saved.schedule) {  // written before checkpoints recorded it
    MT_CHECK(mode != ScheduleOnResume::from_checkpoint)
        << "--use-checkpoint-opt_param-scheduler: checkpoint " << dir << " does not record its learning-rate schedule";
    return;
  }
  if (mode == ScheduleOnResume::from_checkpoint) {
    scheduler_ = std::make_unique<OptimizerParamScheduler>(*saved.schedule);
    return;
  }
  const std::string differences = schedule_differences(*saved.schedule, scheduler_->config());
  MT_CHECK(differences.empty())
      << "the learning-rate schedule differs from checkpoint " << dir << "'s: " << differences
      << ". Pass --override-opt_param-scheduler to use the command line's schedule, or "
      << "--use-checkpoint-opt_param-scheduler to continue the checkpoint's";
}

int64_t Trainer::load_checkpoint(const std::string& root) {
  const CheckpointConfig& flags = config_.checkpoint;
  if (!flags.ckpt_step && !read_latest_iteration(root)) {
    MT_CHECK(!flags.exit_on_missing_checkpoint)
        << "--load " << root << " holds no checkpoint (no latest_checkpointed_iteration.txt) and "
        << "--exit-on-missing-checkpoint is set";
    return -1;
  }
  CheckpointReader checkpoint(root, flags.ckpt_step);
  checkpoint.check_model(model_config_);
  const CheckpointManifest& saved = checkpoint.manifest();
  // Weights: every parameter this rank holds (the tied copy from the embedding's pieces).
  for (auto& stage : chunks_) {
    for (ParamStore* store : stage->param_stores()) checkpoint.read_weights(store->params());
    checkpoint.read_buffers(stage->expert_biases());
  }
  const bool optimizer = !flags.no_load_optim && !flags.finetune;
  if (optimizer) {
    MT_CHECK(saved.optimizer_saved)
        << "checkpoint " << checkpoint.dir() << " was saved with --no-save-optim; add --no-load-optim (or --finetune) "
        << "to load its weights alone";
    for (const Optimizer::Segment& s : optimizer_->segments()) {
      const char* state = s.muon ? "momentum_buffer" : "exp_avg";
      MT_CHECK(checkpoint.has(state, s.param->name))
          << "checkpoint " << checkpoint.dir() << " has no " << (s.muon ? "Muon momentum" : "Adam moments") << " for "
          << s.param->name << ": it was saved with " << (s.muon ? "--optimizer adam" : "--optimizer muon")
          << "; pass the same --optimizer, or --no-load-optim to start the optimizer afresh";
      checkpoint.read(state, *s.param, s.begin, s.m);
      if (!s.muon) checkpoint.read("exp_avg_sq", *s.param, s.begin, s.v);
    }
    optimizer_->set_steps(saved.optimizer_steps);
  }
  // The f32 main copies of 16-bit parameters: the saved ones, or (weights only, or a checkpoint of
  // f32 parameters) the values themselves.
  for (const Optimizer::Segment& s : optimizer_->segments()) {
    if (s.main.empty()) continue;
    const bool saved_main = optimizer && checkpoint.has("main_param", s.param->name);
    checkpoint.read(saved_main ? "main_param" : "param", *s.param, s.begin, s.main);
  }
  if (flags.finetune) return saved.iteration;  // iteration 0, fresh schedule and scaler
  if (optimizer) {
    resume_schedule(saved, checkpoint.dir());
    scheduler_->set_num_steps(saved.scheduler_steps);
    if (scaler_) scaler_->load_state(saved.scaler);
  }
  iteration_ = saved.iteration;
  consumed_train_samples_ = saved.consumed_train;
  train_sampler_ = PretrainingSampler(data_.train->size(), consumed_train_samples_, config_.micro_batch_size,
                                      config_.data_parallel_rank, config_.data_parallel_size);
  if (valid_sampler_)
    valid_sampler_.emplace(data_.valid->size(), saved.consumed_valid,
                           config_.micro_batch_size, config_.data_parallel_rank, config_.data_parallel_size);
  if (!flags.no_load_rng && saved.seed) {
    config_.seed = *saved.seed;
    for (auto& stage : chunks_) stage->set_seed(config_.seed);
  }
  return saved.iteration;
}

}  // namespace mt
