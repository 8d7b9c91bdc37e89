// Owns the training loop (see trainer.h for the semantics it reproduces).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <utility>

#include "backend/backend.h"
#include "backend/gemm.h"
#include "ckpt/shard_file.h"
#include "ops/op_profile.h"
#include "optim/grad_sync.h"
#include "pipeline/executor.h"
#include "pipeline/simulate.h"
#include "plan/flops.h"
#include "train/moe_metrics.h"
#include "train/stage_chunks.h"

namespace mt {

namespace {
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// The data-parallel size and rank come from the grid.
TrainConfig finalized(TrainConfig c, const ParallelGrid& grid, int rank) {
  c.data_parallel_size = grid.dp();
  c.data_parallel_rank = grid.dense_coords(rank).dp;
  c.finalize();
  return c;
}

// Replaces the group by a counting wrapper around it.
CountingCommunicator* counted(std::unique_ptr<Communicator>& group) {
  auto counter = std::make_unique<CountingCommunicator>(std::move(group));
  CountingCommunicator* raw = counter.get();
  group = std::move(counter);
  return raw;
}

std::unique_ptr<Communicator> self_if_null(Communicator* world) {
  return world ? nullptr : make_self_communicator();
}

int world_size(const Communicator* world) { return world ? world->size() : 1; }

Backend& backend_of(const RunContext& context) {
  MT_CHECK(context.backend != nullptr) << "the run context names no backend";
  return *context.backend;
}

ModelConfig finalized(ModelConfig c) {
  c.finalize();
  return c;
}

TrainData checked(TrainData data, const ModelConfig& model, const TrainConfig& train) {
  MT_CHECK(data.train) << "no training data";
  const std::array<int64_t, 3> sizes = train.dataset_sizes();
  const SampleSource* splits[3] = {data.train.get(), data.valid.get(), data.test.get()};
  for (int i = 0; i < 3; ++i) {
    const char* name = split_name(static_cast<Split>(i));
    // No evaluation, or an empty split (--split 99,1,0): never read, as Megatron skips it.
    if (i > 0 && (train.eval_iters == 0 || !splits[i])) continue;
    MT_CHECK(splits[i]->sequence_length() == model.seq_length)
        << "the " << name << " samples hold " << splits[i]->sequence_length() << " tokens, but --seq-length is "
        << model.seq_length;
    MT_CHECK(splits[i]->size() >= sizes[i])
        << "the " << name << " split has " << splits[i]->size() << " samples; the run needs " << sizes[i];
  }
  return data;
}
}  // namespace

GridConfig train_grid_config(const ModelConfig& model, const TrainConfig& train, int world_size) {
  GridConfig g;
  g.world_size = world_size;
  g.tp = static_cast<int>(model.tensor_model_parallel_size);
  g.cp = static_cast<int>(model.context_parallel_size);
  g.pp = train.pipeline.pp;
  // Megatron builds the expert layout on dense models too (and checks it against the dense one).
  g.ep = static_cast<int>(model.moe.expert_model_parallel_size);
  g.etp = static_cast<int>(model.moe.expert_tensor_parallel_size);  // 0: tp
  g.order = train.use_tp_pp_dp_mapping ? kTpPpDpGridOrder : kDefaultGridOrder;
  return g;
}

TrainingLayout training_layout(const ModelConfig& model, const TrainConfig& train, int world_size,
                                WorkspaceTarget target) {
  TrainingLayout l;
  l.model = finalized(model);
  // Training's MoE layers under tp split the tokens over the tp ranks first (inference does not:
  // the engine routes each step's rows whole on every rank).
  MT_CHECK(!l.model.moe.enabled() || l.model.tensor_model_parallel_size == 1 || l.model.sequence_parallel)
      << "--num-experts with --tensor-model-parallel-size " << l.model.tensor_model_parallel_size
      << " needs --sequence-parallel (as in Megatron)";
  const int64_t cp = l.model.context_parallel_size;
  MT_CHECK(cp == 1 || !train.reset_attention_mask)
      << "--reset-attention-mask with --context-parallel-size " << cp
      << " is not supported: the document masks would have to follow the chunks (planned)";
  l.grid = train_grid_config(model, train, world_size);
  const TrainConfig t = finalized(train, ParallelGrid(l.grid), 0);
  l.pipeline = t.pipeline;
  l.pipeline.num_layers = l.model.num_layers;
  l.micro_batch = t.micro_batch_size;
  const std::vector<int64_t> counts = t.microbatch_counts();
  for (size_t i = 0; i + 1 < counts.size(); ++i) l.earlier_microbatches.push_back(static_cast<int>(counts[i]));
  l.num_microbatches = static_cast<int>(counts.back());
  l.eval_microbatches = static_cast<int>(t.eval_num_microbatches);
  l.microbatch_group_size = t.microbatch_group_size;
  // Gradients reduce (and the distributed optimizer shards) over data × context-parallel ranks.
  l.ddp.data_parallel_size = static_cast<int>(t.data_parallel_size * l.model.context_parallel_size);
  l.ddp.use_distributed_optimizer = t.use_distributed_optimizer;
  l.ddp.num_distributed_optimizer_instances = t.num_distributed_optimizer_instances;
  l.ddp.overlap_grad_reduce = t.overlap_grad_reduce;
  l.ddp.bucket_size = t.ddp_bucket_size;
  l.ddp.overlap_param_gather = t.overlap_param_gather;
  l.ddp.average_in_collective = t.ddp_average_in_collective;
  l.target = target;
  l.per_token_loss = t.calculate_per_token_loss;
  l.params_norm = t.log_params_norm;
  if (t.optimizer.muon) l.muon = MuonSetup{*t.optimizer.muon, nullptr, nullptr, muon_qkv_rows(l.model)}.geometry();
  return l;
}

std::array<int64_t, 3> train_dataset_sizes(const ModelConfig& model, const TrainConfig& train, int world_size) {
  return finalized(train, ParallelGrid(train_grid_config(model, train, world_size)), 0).dataset_sizes();
}

Trainer::Trainer(const ModelConfig& model, const TrainConfig& train, const RunContext& context)
    : Trainer(
          model, train,
          [&] {
            Communicator* world = context.world;
            // The dataset sizes need the data-parallel size, which the world size decides.
            const ParallelGrid grid(train_grid_config(model, train, world_size(world)));
            const ModelConfig m = finalized(model);
            const TrainConfig t = finalized(train, grid, 0);
            return build_mock_train_data(m.vocab_size, m.seq_length, t.seed, t.eod_mask_loss, t.dataset_sizes(),
                                         SampleExtras{t.reset_position_ids, t.reset_attention_mask});
          }(),
          context) {}

Trainer::Trainer(const ModelConfig& model, const TrainConfig& train, TrainData data, const RunContext& context)
    : self_(self_if_null(context.world)),
      groups_(make_process_groups(context.world ? *context.world : *self_,
                                  train_grid_config(model, train, world_size(context.world)),
                                  train.num_distributed_optimizer_instances)),
      model_config_(finalized(model)),
      config_(finalized(train, groups_.grid, groups_.world->rank())),
      data_(checked(std::move(data), model_config_, config_)),
      train_sampler_(data_.train->size(), 0, config_.micro_batch_size, config_.data_parallel_rank,
                     config_.data_parallel_size) {
  tp_counter_ = counted(groups_.tp);
  for (auto [group, comm] : {std::pair{CommGroup::dp, &groups_.dp}, {CommGroup::dp, &groups_.dp_cp},
                             {CommGroup::dp, &groups_.dp_intra},
                             {CommGroup::dp, &groups_.dp_inter}, {CommGroup::expert_dp, &groups_.expert_dp},
                             {CommGroup::expert_dp, &groups_.expert_dp_intra}, {CommGroup::expert_dp, &groups_.expert_dp_inter}})
    if (*comm) dp_counters_.push_back({group, counted(*comm)});
  for (auto* group : {&groups_.ep, &groups_.etp, &groups_.etp_ep}) dispatch_counters_.push_back(counted(*group));
  pp_counter_ = counted(groups_.pp);
  cp_counter_ = counted(groups_.cp);
  embedding_counter_ = counted(groups_.embedding);
  if (config_.eval_iters > 0 && data_.valid)
    valid_sampler_.emplace(data_.valid->size(), 0, config_.micro_batch_size, config_.data_parallel_rank,
                           config_.data_parallel_size);
  if (config_.eval_iters > 0 && data_.test)
    test_sampler_.emplace(data_.test->size(), 0, config_.micro_batch_size, config_.data_parallel_rank,
                          config_.data_parallel_size);
  // This rank's pipeline stage and the schedules that drive it (validated by running every
  // rank's list in the simulator: a bad list fails here, not as a hang), from the layout that
  // `megatron plan` reads too.
  Backend& backend = backend_of(context);
  const TrainingLayout layout = training_layout(model, train, groups_.world->size(), {backend.device(), backend.max_threads()});
  pp_rank_ = groups_.grid.dense_coords(groups_.world->rank()).pp;
  const PipelinePlan pipeline = pipeline_plan(layout);
  const PipelinePartition& partition = pipeline.partition;
  train_schedules_ = pipeline.train_by_microbatches;
  eval_schedule_ = pipeline.eval;
  const std::vector<int> slots = pipeline.slots(pp_rank_);

  StageOptions stage_options;
  stage_options.tp_comm = groups_.tp.get();
  stage_options.ep_comm = groups_.ep.get();
  stage_options.etp_comm = groups_.etp.get();
  stage_options.etp_ep_comm = groups_.etp_ep.get();
  stage_options.dp_comm = groups_.dp.get();
  stage_options.cp_comm = groups_.cp.get();
  stage_options.threads = layout.target.threads;
  stage_options.ddp = layout.ddp;
  const DdpConfig& ddp = layout.ddp;
  std::vector<OptimizedParams> optimized;
  for (int c = 0; c < partition.vp; ++c) {
    const ChunkLayers& layers = partition.chunk(pp_rank_, c);
    stage_options.slots = slots[static_cast<size_t>(c)];
    auto stage = std::make_unique<Stage>(model_config_,
                                         StageRange{layers.first_layer, layers.last_layer, layers.embedding, layers.head},
                                         config_.micro_batch_size, backend, &memory_, stage_options);
    stage->set_seed(config_.seed);
    stage->init_params(config_.seed);
    ParamStore& params = stage->params();
    optimized.push_back({&params.params(), {config_.use_distributed_optimizer ? &params.layout() : nullptr, groups_.dp_shard()}});
    auto sync = std::make_unique<DataParallelSync>(
        params, GradSyncGroups{groups_.tp.get(), groups_.dp_shard(), groups_.dp_inter.get(), groups_.embedding.get()},
        ddp, backend, &memory_);
    DataParallelSync* raw = sync.get();
    stage->on_grads_ready([raw](ParamStore::IndexRange r) { raw->grads_ready(r); });
    stage->on_params_needed([raw](ParamStore::IndexRange r) { raw->params_needed(r); });
    dp_syncs_.push_back(std::move(sync));
    // The experts' weights: reduced over expert-dp after the backward (not overlapped with it),
    // their norm summed over etp × ep × pp.
    if (ParamStore* experts = stage->expert_params()) {
      optimized.push_back({&experts->params(),
                           {config_.use_distributed_optimizer ? &experts->layout() : nullptr, groups_.expert_dp_shard()},
                           groups_.expert_model_parallel.get()});
      DdpConfig expert = expert_ddp(model_config_, ddp);
      expert.overlap_grad_reduce = expert.overlap_param_gather = false;
      // Averaging divides by the group's size, but every expert gradient already sums the tokens
      // of all dp ranks and needs 1/dp: only the same size gives the same scale.
      MT_CHECK(!expert.average_in_collective || expert.data_parallel_size == ddp.data_parallel_size)
          << "--ddp-average-in-collective averages the expert gradients over their " << expert.data_parallel_size
          << " expert-data-parallel ranks where " << ddp.data_parallel_size
          << " data-parallel ranks are needed; drop --ddp-average-in-collective for this expert layout";
      expert_syncs_.push_back(std::make_unique<DataParallelSync>(
          *experts, GradSyncGroups{nullptr, groups_.expert_dp_shard(), groups_.expert_dp_inter.get(), nullptr}, expert,
          backend, &memory_));
    }
    chunks_.push_back(std::move(stage));
  }
  std::optional<MuonSetup> muon;
  if (config_.optimizer.muon) {
    MT_CHECK(backend.device() != Device::cuda)
        << "--optimizer muon has no CUDA kernels yet (its Newton-Schulz iteration runs on the CPU): pass --device cpu";
    muon = MuonSetup{*config_.optimizer.muon, groups_.tp.get(), groups_.etp.get(), muon_qkv_rows(layout.model)};
  }
  optimizer_ = std::make_unique<Optimizer>(optimized, backend, &memory_, groups_.model_parallel.get(),
                                           muon ? &*muon : nullptr);
  for (const auto& syncs : {&dp_syncs_, &expert_syncs_})
    for (const auto& sync : *syncs) all_syncs_.push_back(sync.get());
  const int receives = pipeline.receive_buffers(pp_rank_);
  if (receives > 0) {
    const Shape message = chunks_.front()->hidden_shape();
    Arena measure(MemCategory::comm);
    for (int i = 0; i < receives; ++i) measure.alloc(DType::f32, message);
    receive_arena_ = std::make_unique<Arena>(backend, MemCategory::comm, measure.used(), &memory_);
    for (int i = 0; i < receives; ++i) receive_buffers_.push_back(receive_arena_->alloc(DType::f32, message));
  }
  scheduler_ = std::make_unique<OptimizerParamScheduler>(config_.lr_schedule());
  MT_CHECK(config_.loss_scale.fp16 == (model_config_.params_dtype == DType::f16) &&
           config_.loss_scale.bf16 == (model_config_.params_dtype == DType::bf16))
      << "the model and training configs disagree on --bf16/--fp16";
  scaler_ = loss_scaler_from_flags(config_.loss_scale);
  buffers_.resize(static_cast<size_t>(std::max<int64_t>(layout.num_microbatches, config_.eval_num_microbatches)));
}

CommTotals Trainer::comm_totals(CommGroup group) const {
  switch (group) {
    case CommGroup::tp: return tp_counter_->totals();
    case CommGroup::pp: return pp_counter_->totals();
    case CommGroup::embedding: return embedding_counter_->totals();
    case CommGroup::cp: return cp_counter_->totals();
    case CommGroup::dp:
    case CommGroup::expert_dp: {
      CommTotals sum;
      for (const DpCounter& c : dp_counters_)
        if (c.group == group) sum = sum + c.counter->totals();
      return sum;
    }
  }
  MT_FAIL() << "no such communication group";
}

float Trainer::loss_scale() const { return scaler_ ? scaler_->scale() : 1.0f; }

double Trainer::dp_sum(double value) const { return sum_over(groups_.dp.get(), value); }

std::array<double, 2> Trainer::global_sums(std::array<double, 2> values) const {
  return sum_over(groups_.pp.get(), sum_over(groups_.dp_cp.get(), values));
}

void Trainer::run_pipeline(const Schedule& schedule, const std::vector<PipelineChunk*>& chunks, DType activation_dtype) {
  PipelineRun run;
  run.pp = groups_.pp.get();
  run.chunks = chunks;
  run.message = chunks_.front()->hidden_shape();
  run.activation_dtype = activation_dtype;
  run.receive_buffers = receive_buffers_;
  const GemmInputsScope gemm_inputs(activation_dtype);
  execute_pipeline(schedule.ranks[static_cast<size_t>(pp_rank_)], run);
}

ForwardBackwardResult Trainer::forward_backward() {
  // The batch schedule's step at the samples consumed so far (update_num_microbatches).
  const int num_microbatches = static_cast<int>(config_.num_microbatches_at(consumed_train_samples_));
  const std::span<MicroBatchBuffer> buffers(buffers_.data(), static_cast<size_t>(num_microbatches));
  // Read every micro-batch first: the masks fix the per-token normaliser before any forward.
  double local_tokens = 0.0;
  for (MicroBatchBuffer& b : buffers) {
    b.fill(*data_.train, train_sampler_.next());
    local_tokens += b.num_tokens;
  }
  const double global_tokens = config_.calculate_per_token_loss ? dp_sum(local_tokens) : local_tokens;
  const double m = static_cast<double>(num_microbatches);
  // Megatron's 1/dp, unless the reduction averages (--ddp-average-in-collective) over dp × cp ranks,
  // whose cp factor the context-parallel ranks' disjoint tokens must not divide away.
  const double dp = config_.ddp_average_in_collective ? 1.0 / static_cast<double>(model_config_.context_parallel_size)
                                                      : static_cast<double>(config_.data_parallel_size);

  for (auto& stage : chunks_) {
    stage->zero_grads();
    stage->reset_moe_stats();
  }
  std::vector<MicroBatch> batches;
  std::vector<ForwardOptions> options;
  for (MicroBatchBuffer& b : buffers) {
    batches.push_back(b.view(model_config_.seq_length));
    ForwardOptions fo;
    // Dropout masks are keyed by the global sample (the sampler's indices are consecutive within a
    // micro-batch), so any micro-batch size and dp split of the same global batch draws the same masks.
    fo.first_sample = static_cast<uint64_t>(b.indices.front());
    fo.dropout = true;
    // The loss scale multiplies the gradient of the loss; the optimizer divides it out again.
    fo.grad_scale = static_cast<float>(loss_scale() * (config_.calculate_per_token_loss
                                                           ? 1.0 / std::max(global_tokens, 1.0)
                                                           : 1.0 / (std::max(b.num_tokens, 1.0) * m * dp)));
    // Megatron's MoEAuxLossAutoScaler: each micro-batch's auxiliary losses weigh 1/m (and 1/dp,
    // as the gradients are summed over dp here).
    fo.aux_loss_scale = static_cast<float>(loss_scale() / (m * dp));
    options.push_back(fo);
  }
  std::vector<std::unique_ptr<TrainingChunk>> chunks;
  std::vector<PipelineChunk*> run;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    DataParallelSync* sync = dp_syncs_[c].get();
    chunks.push_back(std::make_unique<TrainingChunk>(*chunks_[c], batches, options,
                                                     [sync] { sync->start_last_micro_batch(); }, iteration_ + 1));
    run.push_back(chunks.back().get());
  }
  run_pipeline(train_schedules_.at(num_microbatches), run, model_config_.params_dtype);
  // The loss comes from the chunk with the head (zeros elsewhere).
  const TrainingChunk& chunk = *chunks.back();
  ForwardBackwardResult result;
  for (const LossSums& sums : chunk.losses()) {
    result.loss_sum += sums.loss_sum;
    result.num_tokens += sums.num_tokens;
  }
  for (DataParallelSync* sync : all_syncs()) sync->reduce_grads();
  const std::array<double, 2> global = global_sums({result.loss_sum, result.num_tokens});
  result.loss_sum = global[0];
  result.num_tokens = global[1];
  return result;
}

IterationStats Trainer::train_step() {
  const auto start = Clock::now();
  const CommTotals tp_before = tp_counter_->totals(), pp_before = pp_counter_->totals(),
                   embedding_before = embedding_counter_->totals(), cp_before = cp_counter_->totals();
  double dispatch_before = 0.0;
  for (const CountingCommunicator* c : dispatch_counters_) dispatch_before += c->totals().sent_bytes(c->size());
  IterationStats st;
  st.global_batch_size = config_.global_batch_at(consumed_train_samples_);
  const int64_t num_microbatches = config_.num_microbatches_at(consumed_train_samples_);
  std::array<CommTotals, 7> dp_before;  // dp, dp × cp and expert-dp, the last two with their instances' groups
  for (size_t i = 0; i < dp_counters_.size(); ++i) dp_before[i] = dp_counters_[i].counter->totals();
  const ForwardBackwardResult fb = forward_backward();
  const int64_t step_before = scheduler_->num_steps();
  st.iteration = iteration_ + 1;
  st.lr = scheduler_->lr(step_before);
  st.weight_decay = scheduler_->weight_decay(step_before);
  const float scale = loss_scale();
  std::optional<float> embedding_or_output_lr;
  if (config_.decoupled_lr)
    embedding_or_output_lr = scheduler_->lr(step_before, *config_.decoupled_lr,
                                            config_.decoupled_min_lr.value_or(scheduler_->config().min_lr));
  const Optimizer::StepResult step =
      optimizer_->step(config_.optimizer, st.lr, st.weight_decay, scale, embedding_or_output_lr);
  // An overflow under loss scaling skips the update and backs the scale off (Megatron's
  // found_inf); without a scaler a non-finite gradient is fatal, as Megatron's NaN check is.
  st.skipped = step.found_inf && scaler_.has_value();
  if (!step.found_inf)  // the distributed optimizer's updated shards
    for (DataParallelSync* sync : all_syncs()) sync->gather_params();
  if (scaler_) scaler_->update(step.found_inf);
  st.loss_scale = loss_scale();  // after the update, as Megatron logs it
  MT_CHECK(st.skipped || std::isfinite(step.grad_norm))
      << "found " << (std::isnan(step.grad_norm) ? "NaN" : "Inf") << " in the gradients at iteration " << st.iteration
      << " (grad norm " << step.grad_norm << "): training diverged; lower --lr, lengthen the warmup "
      << "(--lr-warmup-iters) or clip harder (--clip-grad)";
  // Only a successful update advances the schedule, by the samples this iteration consumed.
  if (!st.skipped)
    scheduler_->step(num_microbatches * config_.micro_batch_size * config_.data_parallel_size);
  ++iteration_;
  consumed_train_samples_ += st.global_batch_size;
  st.consumed_samples = consumed_train_samples_;
  st.loss = fb.loss_sum / std::max(fb.num_tokens, 1.0);
  st.num_tokens = fb.num_tokens;
  st.grad_norm = step.grad_norm;
  if (config_.log_params_norm) st.params_norm = optimizer_->params_norm();
  st.logged_lr = scheduler_->current_lr();
  std::vector<const Stage*> stages;
  for (const auto& stage : chunks_) stages.push_back(stage.get());
  st.moe = reduce_moe_metrics(model_config_, stages, num_microbatches, groups_.tp.get(), groups_.cp.get(),
                              groups_.dp.get(),
                              groups_.pp.get());
  // Aux-loss-free balancing (Megatron does it in finalize_model_grads): every rank updates its
  // copies of the biases from the same global counts.
  if (model_config_.moe.expert_bias)
    for (auto& stage : chunks_) stage->update_expert_biases(st.moe.tokens_per_expert);
  st.tp_bytes_sent = (tp_counter_->totals() - tp_before).sent_bytes(tp_counter_->size());
  st.cp_bytes_sent = (cp_counter_->totals() - cp_before).sent_bytes(cp_counter_->size());
  st.pp_bytes_sent = (pp_counter_->totals() - pp_before).sent_bytes(pp_counter_->size()) +
                     (embedding_counter_->totals() - embedding_before).sent_bytes(embedding_counter_->size());
  for (const CountingCommunicator* c : dispatch_counters_) st.ep_bytes_sent += c->totals().sent_bytes(c->size());
  st.ep_bytes_sent -= dispatch_before;
  for (size_t i = 0; i < dp_counters_.size(); ++i)
    st.dp_bytes_sent += (dp_counters_[i].counter->totals() - dp_before[i]).sent_bytes(dp_counters_[i].counter->size());
  st.elapsed_ms = ms_since(start);
  return st;
}

double Trainer::evaluate(Split split) {
  std::optional<PretrainingSampler>& sampler_of_split = split == Split::valid ? valid_sampler_ : test_sampler_;
  MT_CHECK(split != Split::train && sampler_of_split) << "evaluation needs a non-empty valid or test split and --eval-iters > 0";
  PretrainingSampler& sampler = *sampler_of_split;
  const SampleSource& source = *data_.split(split);
  double loss_sum = 0.0, num_tokens = 0.0;
  for (int64_t it = 0; it < config_.eval_iters; ++it) {
    std::vector<MicroBatch> batches;
    for (int64_t mb = 0; mb < config_.eval_num_microbatches; ++mb) {
      MicroBatchBuffer& b = buffers_[static_cast<size_t>(mb)];
      b.fill(source, sampler.next());
      batches.push_back(b.view(model_config_.seq_length));
    }
    // model.eval() under torch.no_grad(): no dropout, nothing kept for a backward. The
    // forward-only path hands on f32 hidden states.
    std::vector<std::unique_ptr<EvaluationChunk>> chunks;
    std::vector<PipelineChunk*> run;
    for (auto& stage : chunks_) {
      chunks.push_back(std::make_unique<EvaluationChunk>(*stage, batches));
      run.push_back(chunks.back().get());
    }
    run_pipeline(eval_schedule_, run, DType::f32);
    for (const LossSums& sums : chunks.back()->losses()) {
      loss_sum += sums.loss_sum;
      num_tokens += sums.num_tokens;
    }
  }
  const std::array<double, 2> global = global_sums({loss_sum, num_tokens});
  return global[0] / std::max(global[1], 1.0);
}

void Trainer::save_logged(const LogFn& log) {
  const std::string& root = config_.checkpoint.save;
  log("saving checkpoint at iteration " + std::to_string(iteration_) + " to " + root);
  const auto start = Clock::now();
  save_checkpoint(root);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", ms_since(start) * 1e-3);
  log("  successfully saved checkpoint from iteration " + std::to_string(iteration_) + " to " + root + " (" +
      seconds + " s)");
}

void Trainer::check_weights_match_across_replicas() {
  for (DataParallelSync* sync : all_syncs()) sync->finish_param_gather();  // every parameter whole
  std::vector<uint8_t> host;
  const auto check = [&](ParamStore& store, Communicator& replicas, const char* what) {
    Checksum sum;
    for (const Param& p : store.params()) {
      host.resize(p.value.bytes());
      backend_for(p.value.device).copy_to_host(host.data(), p.value.data, host.size());
      sum.add(host.data(), host.size());
    }
    const uint64_t mine = sum.value();
    std::vector<uint64_t> all(static_cast<size_t>(replicas.size()));
    replicas.all_gather(TensorView(all.data(), DType::f64, {replicas.size()}),
                        TensorView(const_cast<uint64_t*>(&mine), DType::f64, {1}));
    for (size_t r = 0; r < all.size(); ++r)
      MT_CHECK(all[r] == mine) << "the " << what << " weights differ between data-parallel replicas (ranks " << r
                               << " and " << replicas.rank() << " of the group) at iteration " << iteration_;
  };
  for (auto& stage : chunks_) {
    check(stage->params(), *groups_.dp_cp, "model's");
    if (ParamStore* experts = stage->expert_params()) check(*experts, *groups_.expert_dp, "experts'");
  }
}

bool Trainer::signalled_anywhere(const ExitSignalScope& signal) const {
  double received = signal.received() ? 1.0 : 0.0;
  groups_.world->all_reduce(TensorView(&received, DType::f64, {1}), ReduceOp::max);
  return received > 0.0;
}

bool Trainer::out_of_time() const {
  double minutes = ms_since(built_) / 60000.0;
  groups_.world->all_reduce(TensorView(&minutes, DType::f64, {1}), ReduceOp::max);
  return minutes > *config_.exit_duration_in_mins;
}

void Trainer::log_batch_schedule(const LogFn& log) const {
  log("> step batch size schedule (" + std::to_string(config_.batches.steps().size()) + " steps):");
  for (const BatchStep& step : config_.batches.steps())
    log("  >= " + std::to_string(step.from_sample * model_config_.seq_length) + " tokens (" +
        std::to_string(step.from_sample) + " samples) -> batch_size=" + std::to_string(step.batch_size) +
        ", num_microbatches=" + std::to_string(config_.num_microbatches_at(step.from_sample)));
}

TrainResult Trainer::run(const LogFn& log) {
  TrainResult result;
  const std::array<int64_t, 3> sizes = config_.dataset_sizes();
  log(" > datasets target sizes (minimum size):");
  log("    train:      " + std::to_string(sizes[0]));
  log("    validation: " + std::to_string(sizes[1]));
  log("    test:       " + std::to_string(sizes[2]));
  if (config_.step_batch_size_schedule) log_batch_schedule(log);
  if (config_.train_samples) log("setting training iterations to " + std::to_string(config_.iterations));
  log(format_datetime_line("before the start of training step"));

  const auto run_start = Clock::now();
  auto interval_start = Clock::now();
  double interval_eval_ms = 0.0;  // evaluation and save time is not training time (Megatron stops the timer)
  IntervalAccumulator interval;
  const double world_size = static_cast<double>(groups_.world->size());

  const std::string& save = config_.checkpoint.save;
  const int64_t interval_save = config_.checkpoint.save_interval;
  int64_t num_microbatches = config_.num_microbatches_at(consumed_train_samples_);
  std::optional<ExitSignalScope> exit_signal;
  if (config_.exit_signal) exit_signal.emplace(*config_.exit_signal);
  while (iteration_ < config_.iterations) {
    // training.py: a checkpoint when the batch schedule changes the micro-batch count, unless
    // this iteration was just saved.
    const int64_t previous = std::exchange(num_microbatches, config_.num_microbatches_at(consumed_train_samples_));
    if (num_microbatches != previous && iteration_ != 0 && !save.empty() &&
        !(interval_save && iteration_ % interval_save == 0)) {
      const auto save_start = Clock::now();
      save_logged(log);
      interval_eval_ms += ms_since(save_start);
    }
    const bool first = iteration_ == 0, first_of_run = result.iterations.empty();
    const IterationStats st = train_step();
    if (first_of_run && op_profiling()) reset_op_profile();  // without the warm-up (allocation, GEMM heuristics)
    result.iterations.push_back(st);
    interval.add(st);
    // Megatron prints after the first iteration too (to show start-up cost) but without
    // resetting the interval, so the next line still averages from iteration 1.
    if (st.iteration % config_.log_interval == 0 || first) {
      const double per_iter_ms = (ms_since(interval_start) - interval_eval_ms) / static_cast<double>(interval.iterations());
      LogLine line;
      line.iteration = st.iteration;
      line.train_iters = config_.iterations;
      line.consumed_samples = st.consumed_samples;
      line.elapsed_ms_per_iteration = per_iter_ms;
      // Megatron's throughput: this iteration's batch over the interval's mean time.
      const double flops = flops_per_iteration(model_config_, st.global_batch_size);
      line.tflops_per_gpu = flops / (per_iter_ms * 1e-3 * 1e12 * world_size);
      line.tokens_per_second = static_cast<double>(st.global_batch_size * model_config_.seq_length) / (per_iter_ms * 1e-3);
      line.learning_rate = st.logged_lr;
      line.global_batch_size = st.global_batch_size;
      line.lm_loss = interval.mean_loss();
      line.moe_losses = interval.mean_moe_losses();
      line.loss_scale = st.loss_scale;
      if (!st.skipped) line.grad_norm = st.grad_norm;  // Megatron has no norm for a skipped step
      line.params_norm = st.params_norm;
      line.skipped_iterations = interval.skipped();
      line.nan_iterations = interval.nan();
      log(format_log_line(line, timestamp_now()));
      if (world_size > 1)
        log(format_comm_line(interval.mean_tp_bytes(), interval.mean_pp_bytes(), interval.mean_dp_bytes(),
                             model_config_.moe.enabled() ? std::optional(interval.mean_ep_bytes()) : std::nullopt,
                             model_config_.context_parallel_size > 1 ? std::optional(interval.mean_cp_bytes())
                                                                     : std::nullopt));
      if (model_config_.moe.enabled()) log(format_moe_line(st.moe));
      if (!first) {
        interval.reset();
        interval_start = Clock::now();
        interval_eval_ms = 0.0;
      }
      if (first) log("[after iteration 1] memory (peak bytes by category): " + memory_.report());
      if (config_.show_progress)
        log(format_progress(st.iteration, config_.iterations, ms_since(run_start) * 1e-3));
    }
    if (config_.check_weight_hash_interval && st.iteration % *config_.check_weight_hash_interval == 0) {
      check_weights_match_across_replicas();
      log(">>> Weight hashes match after " + std::to_string(st.iteration) + " iterations...");
    }
    if (valid_sampler_ && config_.evaluate_after(st.iteration)) {
      const auto eval_start = Clock::now();
      const double loss = evaluate(Split::valid);
      result.evaluations.push_back({st.iteration, Split::valid, loss, false});
      log(format_validation_block("iteration " + std::to_string(st.iteration), loss));
      interval_eval_ms += ms_since(eval_start);
    }
    // training.py::checkpoint_and_decide_exit: a save every --save-interval, and one on exit.
    const bool timed_out = config_.exit_duration_in_mins && out_of_time();
    const bool signalled = exit_signal && signalled_anywhere(*exit_signal);
    const bool exiting = config_.exit_after(st.iteration) || timed_out || signalled;
    if (!save.empty() && ((interval_save && st.iteration % interval_save == 0) || exiting)) {
      const auto save_start = Clock::now();
      save_logged(log);
      interval_eval_ms += ms_since(save_start);  // not training time either (Megatron stops its timer)
    }
    if (exiting) {
      // Megatron leaves with sys.exit here, skipping the evaluations after training.
      const std::string why =
          signalled ? (*config_.exit_signal == SIGTERM ? "exiting program after receiving SIGTERM."
                                                       : "exiting program after receiving signal " +
                                                             std::to_string(*config_.exit_signal) + ".")
          : timed_out ? "exiting program after " + std::to_string(ms_since(built_) / 60000.0) + " minutes"
                      : "exiting program at iteration " + std::to_string(st.iteration);
      log(format_datetime_line(why));
      for (DataParallelSync* sync : all_syncs()) sync->finish_param_gather();
      result.exited = true;
      return result;
    }
  }
  log(format_datetime_line("after training is done"));
  if (op_profiling()) {
    std::string report = op_profile_report();
    report.pop_back();  // log ends the line
    log(report);
  }
  // pretrain(): the final state, unless the last interval just saved it.
  if (!save.empty() && iteration_ > 0 && (interval_save == 0 || iteration_ % interval_save != 0)) save_logged(log);
  for (DataParallelSync* sync : all_syncs()) sync->finish_param_gather();  // every parameter whole, as the caller may read them
  const std::string at = "iteration " + std::to_string(iteration_);
  if (valid_sampler_) {
    const double valid = evaluate(Split::valid);
    result.evaluations.push_back({iteration_, Split::valid, valid, true});
    log(format_validation_block(at + " on validation set", valid));
  }
  if (test_sampler_) {
    const double test = evaluate(Split::test);
    result.evaluations.push_back({iteration_, Split::test, test, true});
    log(format_validation_block(at + " on test set", test));
  }
  return result;
}

}  // namespace mt
