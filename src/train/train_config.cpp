// Owns TrainConfig's validation and derived values (see train_config.h).
#include "train/train_config.h"

#include "base/error.h"

namespace mt {

void TrainConfig::finalize() {
  MT_CHECK(micro_batch_size > 0) << "--micro-batch-size must be given and > 0 (got " << micro_batch_size << ")";
  MT_CHECK(data_parallel_size > 0 && data_parallel_rank >= 0 && data_parallel_rank < data_parallel_size)
      << "data-parallel rank " << data_parallel_rank << " outside a data-parallel size of " << data_parallel_size;
  // arguments.py: the global batch defaults to micro batch × dp (one micro-batch per rank).
  if (global_batch_size == 0) global_batch_size = micro_batch_size * data_parallel_size;
  MT_CHECK(global_batch_size > 0) << "--global-batch-size must be > 0 (got " << global_batch_size << ")";
  const int64_t per_step = micro_batch_size * data_parallel_size;
  MT_CHECK(global_batch_size % per_step == 0)
      << "--global-batch-size (" << global_batch_size << ") is not a multiple of --micro-batch-size ("
      << micro_batch_size << ") x data-parallel size (" << data_parallel_size << ") = " << per_step
      << "; choose a global batch that is";
  num_microbatches = global_batch_size / per_step;
  // Megatron silently ignores a bucket size without overlap (one bucket); say so instead.
  MT_CHECK(ddp_bucket_size >= 0) << "--ddp-bucket-size must be positive (got " << ddp_bucket_size << ")";
  MT_CHECK(ddp_bucket_size == 0 || overlap_grad_reduce)
      << "--ddp-bucket-size applies only with --overlap-grad-reduce (without it the gradients are reduced as one "
         "bucket); add --overlap-grad-reduce or drop --ddp-bucket-size";
  MT_CHECK(checkpoint.save_interval >= 0) << "--save-interval must be > 0 (got " << checkpoint.save_interval << ")";
  MT_CHECK(checkpoint.save_interval == 0 || !checkpoint.save.empty())
      << "--save-interval " << checkpoint.save_interval << " needs --save DIR (where to save)";
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
    // training.py::update_train_iters (constant batch size): the last partial batch is dropped.
    iterations = *train_samples / global_batch_size;
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
  MT_CHECK(!exit_duration_in_mins || *exit_duration_in_mins > 0)
      << "--exit-duration-in-mins must be > 0 (got " << exit_duration_in_mins.value_or(0) << ")";

  schedule.train_iters = by_iters ? train_iters : std::nullopt;
  schedule.train_samples = by_samples ? train_samples : std::nullopt;
  schedule.global_batch_size = global_batch_size;
  (void)lr_schedule();  // Megatron's schedule checks, now rather than at the first step
}

LrScheduleConfig TrainConfig::lr_schedule() const { return lr_schedule_config_from_flags(schedule); }

std::array<int64_t, 3> TrainConfig::dataset_sizes() const {
  const int64_t train = train_samples && *train_samples != 0 ? *train_samples : iterations * global_batch_size;
  // Megatron divides by eval_interval unconditionally (a missing one is a crash there); without
  // it we evaluate once, after training, so one evaluation point is needed.
  const int64_t eval_points = eval_interval ? iterations / *eval_interval + 1 : 1;
  return {train, eval_points * eval_iters * global_batch_size, eval_iters * global_batch_size};
}

bool TrainConfig::evaluate_after(int64_t iteration) const {
  return eval_interval && eval_iters > 0 && iteration % *eval_interval == 0;
}

bool TrainConfig::exit_after(int64_t iteration) const { return exit_interval && iteration % *exit_interval == 0; }

}  // namespace mt
