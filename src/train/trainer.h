// Owns the training loop of Megatron-LM's pretrain_gpt.py (training.py::train, train_step,
// evaluate): micro-batches read in Megatron's sampler order and accumulated into one global
// batch (its size the batch schedule's at the samples consumed so far, as update_num_microbatches;
// with --save a checkpoint whenever the micro-batch count changes) with Megatron's loss
// normalisation, the optimizer step at the scheduler's learning rate and weight decay,
// evaluation on the validation split every --eval-interval iterations and on validation and test
// after training, --exit-interval, and the log line.
//
// Loss normalisation (schedules.py::forward_step_calc_loss, finalize_model_grads):
//   default: micro-batch m contributes Σ mask·loss / max(Σ mask, 1) / num_microbatches, so the
//     gradient is the mean over micro-batches of each micro-batch's per-token mean;
//   --calculate-per-token-loss: the gradient is Σ over the global batch of mask·loss gradients
//     divided by max(total Σ mask, 1). Megatron back-propagates the plain sums and divides the
//     gradients after the backward; here the masks are read before any forward, so the total is
//     known up front and goes into grad_scale: the same gradient up to fp32 rounding, with no
//     extra pass over the gradients.
//   Either way the reported lm loss is Σ loss / Σ mask over the global batch (train_step).
// Parallelism: the world communicator is split by the grid (tensor-model-parallel size from the
// model config, pipeline size from the train config). Every rank of a tensor-parallel group and
// every pipeline stage reads the same micro-batches (each runs the deterministic sampler itself:
// no broadcast needed; the first stage uses the tokens, the last the labels). Data-parallel rank
// r reads its slice of every global batch; grad_scale carries the 1/dp of Megatron's averaging in
// the default mode, so the gradient reduction over dp is a plain sum (an average in the
// collective with --ddp-average-in-collective, whose grad_scale leaves 1/dp out), and the
// per-token total is all-reduced before the first forward. Micro-batches run through the
// pipeline schedule (pipeline/executor.h; one stage: forward and backward of each in turn); the
// loss sums come from the last stage and are shared over the pipeline group.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/counting_communicator.h"
#include "model/stage.h"
#include "optim/grad_sync.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/process_groups.h"
#include "pipeline/executor.h"
#include "plan/comm_volume.h"
#include "plan/memory_plan.h"
#include "train/exit_signal.h"
#include "train/metrics.h"
#include "train/run_context.h"
#include "train/train_config.h"
#include "train/train_data.h"

namespace mt {

struct CheckpointManifest;

struct EvalRecord {
  int64_t iteration = 0;  // training iterations done when it ran
  Split split = Split::valid;
  double loss = 0.0;      // Σ loss / Σ mask over eval_iters global batches
  bool after_training = false;
};

struct TrainResult {
  std::vector<IterationStats> iterations;
  std::vector<EvalRecord> evaluations;
  bool exited = false;  // stopped by --exit-interval (no evaluation after training, as Megatron)
};

// What forward_backward accumulated over one global batch (all ranks' sums, on every rank).
struct ForwardBackwardResult {
  double loss_sum = 0.0;    // Σ mask·token loss
  double num_tokens = 0.0;  // Σ mask
};

// The grid a run lays its world_size ranks out on: tp from the model config, pp from the train
// config, the rank order from --use-tp-pp-dp-mapping; data parallelism takes the rest.
GridConfig train_grid_config(const ModelConfig& model, const TrainConfig& train, int world_size);

// The samples each split needs (TrainConfig::dataset_sizes) for a run of world_size ranks, whose
// grid decides the data-parallel size they depend on.
std::array<int64_t, 3> train_dataset_sizes(const ModelConfig& model, const TrainConfig& train, int world_size);

// What lays out every rank's memory (plan/memory_plan.h), as the Trainer builds it: the grid,
// the pipeline split, the schedule's micro-batches, the DDP settings; threads: the backend's.
// Throws mt::Error for a layout the grid refuses.
TrainingLayout training_layout(const ModelConfig& model, const TrainConfig& train, int world_size,
                                WorkspaceTarget target);

class Trainer {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // --mock-data: Megatron's mock splits with NullTokenizer ids for model.vocab_size, sized from
  // the config (TrainConfig::dataset_sizes).
  // context: the job's communicator (every rank constructs its Trainer with the same configs)
  // and the backend to run on.
  Trainer(const ModelConfig& model, const TrainConfig& train, const RunContext& context);
  // Any data (tests; real datasets later). valid/test may be null only when eval_iters is 0.
  Trainer(const ModelConfig& model, const TrainConfig& train, TrainData data, const RunContext& context);
  // On the CPU backend; world: all ranks of the job (null: this process alone).
  Trainer(const ModelConfig& model, const TrainConfig& train, Communicator* world = nullptr)
      : Trainer(model, train, RunContext::cpu(world)) {}
  Trainer(const ModelConfig& model, const TrainConfig& train, TrainData data, Communicator* world = nullptr)
      : Trainer(model, train, std::move(data), RunContext::cpu(world)) {}

  // The whole run: iterations until --train-iters (or --exit-interval), the log line every
  // --log-interval iterations (and after the first), evaluations, then (unless exited) the
  // validation and test evaluations. `log` receives every line Megatron would print on its
  // logging rank (every rank receives them; the app prints those of the last rank, as Megatron).
  TrainResult run(const LogFn& log);

  // One iteration (train_step): forward_backward, the optimizer step at lr(samples consumed
  // before it), the scheduler advanced by this iteration's global batch when the update happened.
  // Throws mt::Error on a NaN/Inf loss or gradient (Megatron's default
  // --check-for-nan-in-loss-and-grad is fatal).
  IterationStats train_step();
  // Zeroes the gradients and accumulates those of the next global batch's micro-batches of
  // this rank (advances the train sampler). Public so tests can inspect the gradients.
  ForwardBackwardResult forward_backward();
  // eval_iters global batches of `split` through the model's forward-only path (no dropout, no
  // gradients, nothing kept); the validation split continues where its previous evaluation
  // stopped (Megatron's consumed_valid_samples).
  double evaluate(Split split);

  // --save: the run's state as a checkpoint of the current iteration under `root`, each rank
  // writing its pieces (ckpt/: crash-safe, checksummed, reshardable). Collective.
  void save_checkpoint(const std::string& root);
  // --load: restores the checkpoint under `root` ("latest", or config().checkpoint.ckpt_step),
  // saved under any layout: weights, and unless --no-load-optim / --finetune the optimizer state,
  // iteration, consumed samples, LR schedule and loss scale (and unless --no-load-rng the seed).
  // A schedule that differs from the checkpoint's is refused unless --override-opt_param-scheduler
  // or --use-checkpoint-opt_param-scheduler says which to use. Returns the iteration loaded, or -1 when there is no checkpoint (an error with
  // --exit-on-missing-checkpoint). Collective.
  int64_t load_checkpoint(const std::string& root);
  // --check-weight-hash-across-dp-replicas-interval: throws unless every data-parallel replica's
  // weights (experts: every expert-dp replica's) hash alike. Collective.
  void check_weights_match_across_replicas();

  // This rank's part of the model: the whole model, or its pipeline stage's model chunks
  // (virtual stages chunk·pp + pp rank).
  Stage& model(int chunk = 0) { return *chunks_.at(static_cast<size_t>(chunk)); }
  int chunks() const { return static_cast<int>(chunks_.size()); }
  const ModelConfig& model_config() const { return model_config_; }
  const TrainConfig& config() const { return config_; }
  const OptimizerParamScheduler& scheduler() const { return *scheduler_; }
  const TrainData& data() const { return data_; }
  const MemoryTracker& memory() const { return memory_; }
  const ProcessGroups& groups() const { return groups_; }
  int64_t iteration() const { return iteration_; }
  int64_t consumed_train_samples() const { return consumed_train_samples_; }
  // Every call this rank has made over a counted group since it was built, by kind; a step's
  // traffic is the difference around train_step (what plan_comm predicts).
  CommTotals comm_totals(CommGroup group) const;

 private:
  // --exit-duration-in-mins: whether any rank has run longer than it (a MAX over the world, so
  // that every rank stops after the same iteration).
  bool out_of_time() const;
  bool signalled_anywhere(const ExitSignalScope& signal) const;  // --exit-signal-handler: on any rank
  // load_checkpoint's schedule check (see there).
  void resume_schedule(const CheckpointManifest& saved, const std::string& dir);
  // Sums over the data-parallel group (every rank gets the total).
  double dp_sum(double value) const;
  // Sums over dp of values only the last pipeline stage has (the loss sums), given to every stage
  // (they are zero elsewhere).
  std::array<double, 2> global_sums(std::array<double, 2> values) const;
  // The --step-batch-size-schedule table Megatron prints at start-up.
  void log_batch_schedule(const LogFn& log) const;
  // save_checkpoint(--save) between Megatron's two log lines.
  void save_logged(const LogFn& log);
  // Runs this rank's list of `schedule` on its chunks.
  void run_pipeline(const Schedule& schedule, const std::vector<PipelineChunk*>& chunks, DType activation_dtype);

  // The communicators come first: the data checks and the configs depend on the grid.
  std::unique_ptr<Communicator> self_;  // world when none is given
  ProcessGroups groups_;
  // The groups wrapped so the log can report the bytes sent over each.
  CountingCommunicator* tp_counter_ = nullptr;
  CountingCommunicator* cp_counter_ = nullptr;
  // dp's, dp × cp's and expert-dp's, with their instances' groups when there are several
  // distributed-optimizer instances: each counted under the role it serves (CommGroup::dp or expert_dp).
  struct DpCounter {
    CommGroup group;
    CountingCommunicator* counter;
  };
  std::vector<DpCounter> dp_counters_;
  // The token dispatchers' groups (ep, etp, etp × ep): reported, not planned (dropless routing's
  // volume depends on the data).
  std::vector<CountingCommunicator*> dispatch_counters_;
  CountingCommunicator* pp_counter_ = nullptr;
  CountingCommunicator* embedding_counter_ = nullptr;
  ModelConfig model_config_;
  TrainConfig config_;
  TrainData data_;
  MemoryTracker memory_;
  int pp_rank_ = 0;
  // This run's pipeline schedules (pp = 1: no pipelining): training's by micro-batch count (one
  // per step of a --step-batch-size-schedule), evaluation's.
  std::map<int, Schedule> train_schedules_;
  Schedule eval_schedule_;
  std::vector<std::unique_ptr<Stage>> chunks_;
  std::unique_ptr<Arena> receive_arena_;  // where received activations and gradients wait
  std::vector<TensorView> receive_buffers_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::unique_ptr<DataParallelSync>> dp_syncs_;      // one per chunk
  std::vector<std::unique_ptr<DataParallelSync>> expert_syncs_;  // one per chunk with MoE layers
  // Every sync, dense and expert (filled once, by the constructor).
  std::vector<DataParallelSync*> all_syncs_;
  const std::vector<DataParallelSync*>& all_syncs() const { return all_syncs_; }
  std::unique_ptr<OptimizerParamScheduler> scheduler_;
  std::chrono::steady_clock::time_point built_ = std::chrono::steady_clock::now();  // --exit-duration-in-mins
  std::optional<LossScaler> scaler_;
  float loss_scale() const;  // 1 without a scaler  // --fp16 (dynamic) or --loss-scale (constant)
  PretrainingSampler train_sampler_;
  std::optional<PretrainingSampler> valid_sampler_, test_sampler_;
  // One per micro-batch of the largest global batch (training's or evaluation's); an iteration
  // uses the first ones.
  std::vector<MicroBatchBuffer> buffers_;
  int64_t iteration_ = 0;
  int64_t consumed_train_samples_ = 0;
};

}  // namespace mt
