// Owns TrainConfig: the training-loop settings of `pretrain_gpt.py` (batch sizes, run length,
// evaluation, exit, loss normalisation, LR/WD schedule flags, data), their validation with one
// clear message per inconsistency, and what Megatron derives from them (the global batch and
// number of micro-batches of each iteration, iterations of a sample-based run, the dataset sizes
// of each split, the scheduler's config).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "pipeline/partition.h"
#include "train/batch_schedule.h"

namespace mt {

// Megatron's checkpoint flags.
// What a resume does with a learning-rate schedule that differs from the checkpoint's (Megatron's
// OptimizerParamScheduler.load_state_dict): refuse, naming the differences; keep the command
// line's (--override-opt_param-scheduler); or take the checkpoint's
// (--use-checkpoint-opt_param-scheduler).
enum class ScheduleOnResume { must_match, from_flags, from_checkpoint };

struct CheckpointConfig {
  std::string save;                 // --save: directory to save into (empty: never)
  std::string load;                 // --load: directory to resume from (empty: start fresh)
  int64_t save_interval = 0;        // --save-interval: iterations between saves (0: only at the end)
  bool no_save_optim = false;       // --no-save-optim: weights only
  bool no_load_optim = false;       // --no-load-optim: fresh optimizer state
  bool no_save_rng = false;         // --no-save-rng
  bool no_load_rng = false;         // --no-load-rng: keep this run's --seed for dropout
  bool finetune = false;            // --finetune: weights only, iteration 0, fresh optimizer and schedule
  bool exit_on_missing_checkpoint = false;  // --exit-on-missing-checkpoint
  std::optional<int64_t> ckpt_step;         // --ckpt-step: this iteration instead of the latest
  // --save-retain-interval: after each save, the previous checkpoint is deleted unless its
  // iteration is a multiple of this (a multiple of --save-interval).
  std::optional<int64_t> save_retain_interval;
  ScheduleOnResume schedule_on_resume = ScheduleOnResume::must_match;
  // What checkpoints record of the tokenizer (the app's record of its flags), so that `generate`
  // needs only --load; null: nothing.
  nlohmann::json tokenizer;
};

struct TrainConfig {
  int64_t micro_batch_size = 0;   // --micro-batch-size (required, as in Megatron)
  int64_t global_batch_size = 0;  // --global-batch-size; 0 = micro batch × data-parallel size
  // --step-batch-size-schedule (thresholds in samples): the global batch grows with the samples
  // consumed. Megatron refuses --global-batch-size with it; here it may be given when it equals
  // the schedule's final batch (Megatron's own GPT-3 175B example passes both), which it becomes.
  std::optional<BatchSchedule> step_batch_size_schedule;
  // --eval-global-batch-size: samples per evaluation iteration; 0 = global_batch_size (under a
  // schedule: its final batch, which Megatron uses when --global-batch-size is given too).
  int64_t eval_global_batch_size = 0;
  // Not flags: the parallel grid sets them. Rank r of dp reads its slice of every global batch.
  int64_t data_parallel_size = 1;
  int64_t data_parallel_rank = 0;
  // --use-tp-pp-dp-mapping: rank order tp-cp-ep-pp-dp instead of Megatron's default tp-cp-ep-dp-pp.
  bool use_tp_pp_dp_mapping = false;
  // --use-distributed-optimizer: each data-parallel rank keeps the optimizer state of, and
  // updates, 1/dp of the parameters (ZeRO-1); gradients are reduce-scattered, parameters gathered.
  bool use_distributed_optimizer = false;
  // --num-distributed-optimizer-instances: the optimizer state sharded within each of N groups
  // of dp/N ranks instead of over all of dp (model/param_layout.h's DdpConfig).
  int num_distributed_optimizer_instances = 1;
  // --overlap-grad-reduce: each gradient bucket's dp reduction starts (non-blocking) as soon as
  // the last micro-batch's backward has finished its parameters. --ddp-bucket-size: elements per
  // bucket (0: Megatron's max(40M, 1M·dp)); buckets exist only with overlap, as in Megatron.
  bool overlap_grad_reduce = false;
  int64_t ddp_bucket_size = 0;
  // --overlap-param-gather (distributed optimizer, with --overlap-grad-reduce): the updated
  // parameters' all-gathers start after the step and each is waited for only when the next
  // forward reaches its bucket.
  bool overlap_param_gather = false;
  // --ddp-average-in-collective: the dp reduction averages (NCCL's AVG) instead of summing
  // gradients pre-scaled by 1/dp.
  bool ddp_average_in_collective = false;

  // --pipeline-model-parallel-size and the split flags (pipeline/partition.h); its num_layers is
  // the model's (the trainer sets it). --microbatch-group-size-per-virtual-pipeline-stage: 0 = pp.
  PartitionConfig pipeline;
  int microbatch_group_size = 0;

  CheckpointConfig checkpoint;

  // Exactly one of the two (Megatron's iteration-based or sample-based training).
  std::optional<int64_t> train_iters;    // --train-iters
  std::optional<int64_t> train_samples;  // --train-samples

  int64_t log_interval = 100;             // --log-interval
  bool log_params_norm = false;           // --log-params-norm: the parameters' L2 norm after each update
  std::optional<int64_t> eval_interval;   // --eval-interval; unset: evaluate only after training
  int64_t eval_iters = 100;               // --eval-iters; 0 disables evaluation
  std::optional<int64_t> exit_interval;   // --exit-interval
  // --exit-duration-in-mins: save (with --save) and stop after the first iteration that ends later
  // than this many minutes after the trainer was built, on every rank at the same iteration.
  std::optional<double> exit_duration_in_mins;
  // --exit-signal-handler: this signal (--exit-signal, SIGTERM by default) on any rank makes every
  // rank finish its iteration, save (with --save) and stop, as --exit-duration-in-mins does.
  std::optional<int> exit_signal;
  // --check-weight-hash-across-dp-replicas-interval: every this many iterations, stop with an error
  // unless every data-parallel replica holds the same weights (experts: every expert-dp replica).
  std::optional<int64_t> check_weight_hash_interval;
  uint64_t seed = 1234;                   // --seed (init, dropout, data shuffle)

  // --calculate-per-token-loss: the global batch's gradient is Σ token-loss gradients / Σ tokens
  // instead of the mean over micro-batches of each micro-batch's per-token mean.
  bool calculate_per_token_loss = false;
  bool eod_mask_loss = false;  // --eod-mask-loss: no loss where the input token is EOD
  bool reset_position_ids = false;    // --reset-position-ids: positions restart at 0 after each EOD
  bool reset_attention_mask = false;  // --reset-attention-mask: tokens attend only within their document

  // Adam's betas and epsilon and --clip-grad. Its lr and weight_decay fields are NOT used: the
  // scheduler below decides both at every step.
  OptimizerConfig optimizer;
  // --decoupled-lr / --decoupled-min-lr: the word embedding's and the output layer's peak and
  // final learning rate (Megatron's is_embedding_or_output_parameter group), on the same schedule.
  std::optional<double> decoupled_lr, decoupled_min_lr;
  // --lr, --min-lr, --lr-*, --weight-decay, --start/end-weight-decay, --weight-decay-incr-style.
  // Its train_iters / train_samples / global_batch_size are overwritten by finalize() from the
  // fields above, so there is one source of truth.
  LrScheduleFlags schedule;
  // --fp16 / --bf16 and the loss-scale flags: a dynamic scaler under --fp16, a constant one with
  // --loss-scale, none otherwise.
  LossScaleFlags loss_scale;

  // Print an elapsed/remaining estimate after each log line (the app sets it only when stdout is
  // a terminal, so pipes and CI logs never see it).
  bool show_progress = false;

  // Filled by finalize().
  BatchSchedule batches;         // the step schedule, or global_batch_size from sample 0
  int64_t iterations = 0;        // train_iters, or what train_samples takes (update_train_iters)
  int64_t eval_num_microbatches = 0;  // eval global batch / (micro batch × dp)

  // The global batch and the micro-batches per data-parallel rank of the iteration that starts
  // after `consumed` samples (Megatron's update_num_microbatches(consumed_samples)).
  int64_t global_batch_at(int64_t consumed) const { return batches.batch_at(consumed); }
  int64_t num_microbatches_at(int64_t consumed) const;
  // Every micro-batch count of the schedule, ascending (one without a schedule).
  std::vector<int64_t> microbatch_counts() const;

  // Validates and fills the derived fields, the way Megatron's validate_args and
  // update_train_iters do. Throws mt::Error naming the flags to fix.
  void finalize();

  // The scheduler's config (in samples); valid after finalize().
  LrScheduleConfig lr_schedule() const;

  // Samples requested from the train/valid/test splits (training.py::
  // get_train_valid_test_num_samples): train = train_samples or train_iters × gbs (under a
  // schedule gbs is its final, largest batch, and a sample-based run's last batch, read whole,
  // may need more than train_samples: what the run consumes); valid = (iterations //
  // eval_interval + 1) × eval_iters × eval gbs (one evaluation point without --eval-interval);
  // test = eval_iters × eval gbs.
  std::array<int64_t, 3> dataset_sizes() const;

  // Evaluation after this iteration (every --eval-interval iterations).
  bool evaluate_after(int64_t iteration) const;
  // --exit-interval: stop after an iteration that is a multiple of it.
  bool exit_after(int64_t iteration) const;
};

}  // namespace mt
