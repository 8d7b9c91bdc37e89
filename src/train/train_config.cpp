// Owns TrainConfig's validation and derived values (see train_config.h).
#include "train/train_config.h"

#include <algorithm>
#include <csignal>

#include "base/error.h"

namespace mt {

void TrainConfig::finalize() {
  MT_CHECK(micro_batch_size > 0) << "--micro-batch-size must be given and > 0 (got " << micro_batch_size << ")";
  MT_CHECK(data_parallel_size > 0 && data_parallel_rank >= 0 && data_parallel_rank < data_parallel_size)
      << "data-parallel rank " << data_parallel_rank << " outside a data-parallel size of " << data_parallel_size;
  const int64_t per_step = micro_batch_size * data_parallel_size;
  if (step_batch_size_schedule) {
    MT_CHECK(!step_batch_size_schedule->empty()) << "--step-batch-size-schedule has no entry";
    const int64_t last = step_batch_size_schedule->final_batch();
    MT_CHECK(global_batch_size == 0 || global_batch_size == last)
        << "--global-batch-size " << global_batch_size << " differs from the final batch size " << last
        << " of --step-batch-size-schedule; Megatron-LM refuses the two together, megatron.cpp accepts "
           "--global-batch-size only when it equals the schedule's final batch: drop it or pass " << last;
    global_batch_size = last;
    batches = *step_batch_size_schedule;
  } else {
    // arguments.py: the global batch defaults to micro batch × dp (one micro-batch per rank).
    if (global_batch_size == 0) global_batch_size = per_step;
    MT_CHECK(global_batch_size > 0) << "--global-batch-size must be > 0 (got " << global_batch_size << ")";
    batches = BatchSchedule::constant(global_batch_size);
  }
  // Megatron checks only the step in use (so a resume under more ranks may skip early steps);
  // every step is checked here, before anything runs.
  for (const BatchStep& step : batches.steps())
    MT_CHECK(step.batch_size % per_step == 0)
        << (step_batch_size_schedule ? "the --step-batch-size-schedule batch size " : "--global-batch-size ")
        << "(" << step.batch_size << ") is not a multiple of --micro-batch-size (" << micro_batch_size
        << ") x data-parallel size (" << data_parallel_size << ") = " << per_step << "; choose a global batch that is";
  if (eval_global_batch_size == 0) eval_global_batch_size = global_batch_size;
  MT_CHECK(eval_global_batch_size > 0 && eval_global_batch_size % per_step == 0)
      << "--eval-global-batch-size (" << eval_global_batch_size << ") must be a positive multiple of "
      << "--micro-batch-size (" << micro_batch_size << ") x data-parallel size (" << data_parallel_size << ") = " << per_step;
  eval_num_microbatches = eval_global_batch_size / per_step;
  // Megatron silently ignores a bucket size without overlap (one bucket); say so instead.
  MT_CHECK(ddp_bucket_size >= 0) << "--ddp-bucket-size must be positive (got " << ddp_bucket_size << ")";
  MT_CHECK(ddp_bucket_size == 0 || overlap_grad_reduce)
      << "--ddp-bucket-size applies only with --overlap-grad-reduce (without it the gradients are reduced as one "
         "bucket); add --overlap-grad-reduce or drop --ddp-bucket-size";
  MT_CHECK(checkpoint.save_interval >= 0) << "--save-interval must be > 0 (got " << checkpoint.save_interval << ")";
  MT_CHECK(!checkpoint.ckpt_step || *checkpoint.ckpt_step >= 0) << "--ckpt-step must be >= 0";
  // arguments.py's checks.
  MT_CHECK(!overlap_param_gather || use_distributed_optimizer)
      << "--overlap-param-gather is only supported with the distributed optimizer; add --use-distributed-optimizer";
  MT_CHECK(!overlap_param_gather || overlap_grad_reduce)
      << "--overlap-param-gather needs --overlap-grad-reduce; add it";
  MT_CHECK(num_distributed_optimizer_instances >= 1)
      << "--num-distributed-optimizer-instances must be >= 1 (got " << num_distributed_optimizer_instances << ")";
  MT_CHECK(num_distributed_optimizer_instances == 1 || use_distributed_optimizer)
      << "--num-distributed-optimizer-instances " << num_distributed_optimizer_instances
      << " needs the distributed optimizer; add --use-distributed-optimizer";
  MT_CHECK(data_parallel_size % num_distributed_optimizer_instances == 0)
      << "--num-distributed-optimizer-instances " << num_distributed_optimizer_instances
      << " does not divide the data-parallel size " << data_parallel_size << "; choose a divisor of it";
  // distributed_data_parallel.py: the per-token loss already normalises over every rank's tokens.
  MT_CHECK(!(ddp_average_in_collective && calculate_per_token_loss))
      << "--ddp-average-in-collective cannot be combined with --calculate-per-token-loss (the gradients are "
         "already normalised by the global token count, so the reduction must sum); drop one of them";

  // Megatron tests `if args.train_iters:`, so 0 counts as not given.
  const bool by_iters = train_iters.has_value() && *train_iters != 0;
  const bool by_samples = train_samples.has_value() && *train_samples != 0;
  MT_CHECK(!(by_iters && by_samples)) << "--train-iters and --train-samples are mutually exclusive; give one of them";
  MT_CHECK(by_iters || by_samples) << "either --train-iters or --train-samples must be given";
  if (by_iters) {
    MT_CHECK(*train_iters > 0) << "--train-iters must be > 0 (got " << *train_iters << ")";
    iterations = *train_iters;
  } else {
    MT_CHECK(*train_samples > 0) << "--train-samples must be > 0 (got " << *train_samples << ")";
    // training.py::update_train_iters: a constant batch drops the last partial batch; a schedule
    // runs until the samples are reached.
    iterations = step_batch_size_schedule ? batches.iterations_for_samples(*train_samples)
                                          : *train_samples / global_batch_size;
    MT_CHECK(iterations > 0) << "--train-samples (" << *train_samples << ") is less than one global batch ("
                             << global_batch_size << "); nothing to train";
  }

  MT_CHECK(log_interval > 0) << "--log-interval must be > 0 (got " << log_interval << ")";
  MT_CHECK(!eval_interval || *eval_interval > 0) << "--eval-interval must be > 0 (got " << eval_interval.value_or(0)
                                                 << "); leave it out to evaluate only after training";
  MT_CHECK(eval_iters >= 0) << "--eval-iters must be >= 0 (got " << eval_iters << "); 0 disables evaluation";
  MT_CHECK(!exit_interval || *exit_interval > 0) << "--exit-interval must be > 0 (got " << exit_interval.value_or(0)
                                                 << ")";
  MT_CHECK(!decoupled_min_lr || decoupled_lr) << "--decoupled-min-lr applies with --decoupled-lr only";
  MT_CHECK(!decoupled_lr || *decoupled_lr >= 0) << "--decoupled-lr must be >= 0 (got " << decoupled_lr.value_or(0) << ")";
  if (checkpoint.save_retain_interval) {
    MT_CHECK(*checkpoint.save_retain_interval > 0 && checkpoint.save_interval > 0 &&
             *checkpoint.save_retain_interval % checkpoint.save_interval == 0)
        << "--save-retain-interval " << *checkpoint.save_retain_interval
        << " must be a positive multiple of --save-interval (" << checkpoint.save_interval << ")";
  }
  MT_CHECK(!check_weight_hash_interval || *check_weight_hash_interval > 0)
      << "--check-weight-hash-across-dp-replicas-interval must be > 0 (got " << check_weight_hash_interval.value_or(0)
      << ")";
  MT_CHECK(!exit_signal || (*exit_signal > 0 && *exit_signal < NSIG && *exit_signal != SIGKILL && *exit_signal != SIGSTOP))
      << "--exit-signal " << exit_signal.value_or(0) << " is not a signal that can be handled";
  MT_CHECK(!exit_duration_in_mins || *exit_duration_in_mins > 0)
      << "--exit-duration-in-mins must be > 0 (got " << exit_duration_in_mins.value_or(0) << ")";

  schedule.train_iters = by_iters ? train_iters : std::nullopt;
  schedule.train_samples = by_samples ? train_samples : std::nullopt;
  schedule.global_batch_size = global_batch_size;
  (void)lr_schedule();  // Megatron's schedule checks, now rather than at the first step
}

LrScheduleConfig TrainConfig::lr_schedule() const { return lr_schedule_config_from_flags(schedule); }

int64_t TrainConfig::num_microbatches_at(int64_t consumed) const {
  return global_batch_at(consumed) / (micro_batch_size * data_parallel_size);
}

std::vector<int64_t> TrainConfig::microbatch_counts() const {
  std::vector<int64_t> counts;
  for (const BatchStep& step : batches.steps()) {
    const int64_t m = step.batch_size / (micro_batch_size * data_parallel_size);
    if (counts.empty() || counts.back() != m) counts.push_back(m);  // steps never shrink
  }
  return counts;
}

std::array<int64_t, 3> TrainConfig::dataset_sizes() const {
  int64_t train = train_samples && *train_samples != 0 ? *train_samples : iterations * global_batch_size;
  const std::vector<BatchRun> runs = batches.runs(0, iterations);
  if (!runs.empty()) train = std::max(train, runs.back().start_sample + runs.back().batch_size * runs.back().iterations);
  // Megatron divides by eval_interval unconditionally (a missing one is a crash there); without
  // it we evaluate once, after training, so one evaluation point is needed.
  const int64_t eval_points = eval_interval ? iterations / *eval_interval + 1 : 1;
  return {train, eval_points * eval_iters * eval_global_batch_size, eval_iters * eval_global_batch_size};
}

bool TrainConfig::evaluate_after(int64_t iteration) const {
  return eval_interval && eval_iters > 0 && iteration % *eval_interval == 0;
}

bool TrainConfig::exit_after(int64_t iteration) const { return exit_interval && iteration % *exit_interval == 0; }

}  // namespace mt
