// Owns the learning-rate and weight-decay schedules: Megatron-LM's OptimizerParamScheduler
// (megatron/core/optimizer_param_scheduler.py) with the same formulas, edge cases and checks, and
// the translation of Megatron's iteration- or sample-based flags into scheduler steps
// (megatron/training/training.py::get_optimizer_param_scheduler).
//
// What a "step" is. Megatron's scheduler counts SAMPLES, in both training modes:
//   - iteration-based (--train-iters):  lr_decay_steps = lr_decay_iters * global_batch_size,
//       lr_warmup_steps = lr_warmup_iters * global_batch_size, wd_incr_steps = train_iters * gbs,
//       wsd_decay_steps = lr_wsd_decay_iters * gbs;
//   - sample-based (--train-samples):   the *_samples flags are used as they are.
//   After every iteration whose optimizer update succeeded, the trainer advances the scheduler by
//   the samples that iteration consumed (num_microbatches * micro_batch_size * dp; with batch-size
//   ramp-up this is the *current* global batch, while the decay lengths above use the final one).
//   An iteration skipped by the fp16 loss scaler does NOT advance the schedule.
//   Consequently the update of iteration i (1-based, no skips) uses lr((i-1) * gbs): the first
//   update runs at lr_warmup_init (0 by default) when there is warmup. Megatron's log line for
//   iteration i prints the lr read after the increment, i.e. lr(i * gbs).
//
// lr_warmup_steps is a double: with --lr-warmup-fraction Megatron sets it to
// fraction * lr_decay_steps without rounding, and every comparison and ratio uses that value.
// All arithmetic is in double (Python floats); lr() and weight_decay() round the result to float.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mt {

// --lr-decay-style: constant | linear | cosine | inverse-square-root | WSD
enum class LrDecayStyle { constant, linear, cosine, inverse_square_root, wsd };
// --lr-wsd-decay-style: exponential | linear | cosine | minus_sqrt
enum class WsdDecayStyle { exponential, linear, cosine, minus_sqrt };
// --weight-decay-incr-style: constant | linear | cosine
enum class WdIncrStyle { constant, linear, cosine };

// Parse / print the flag spellings exactly as Megatron accepts them ("WSD" is upper case,
// "inverse-square-root" hyphenated, "minus_sqrt" with an underscore). Unknown names throw
// mt::Error naming the flag and listing the choices.
LrDecayStyle parse_lr_decay_style(std::string_view name);
WsdDecayStyle parse_wsd_decay_style(std::string_view name);
WdIncrStyle parse_wd_incr_style(std::string_view name);
std::string_view to_string(LrDecayStyle style);
std::string_view to_string(WsdDecayStyle style);
std::string_view to_string(WdIncrStyle style);

// The scheduler's inputs, already in steps (= samples, see the file comment). Field names follow
// OptimizerParamScheduler.__init__; the comment names the flag each comes from.
struct LrScheduleConfig {
  double max_lr = 0.0;          // --lr
  double min_lr = 0.0;          // --min-lr
  double lr_warmup_init = 0.0;  // --lr-warmup-init (Megatron's init_lr): warmup starts here
  double lr_warmup_steps = 0.0; // from --lr-warmup-iters/-samples/-fraction; may be fractional
  int64_t lr_decay_steps = 0;   // from --lr-decay-iters/-samples (default: train iters/samples)
  LrDecayStyle lr_decay_style = LrDecayStyle::linear;
  // Length of WSD's final anneal; required (Megatron asserts not None) when the style is WSD.
  std::optional<int64_t> wsd_decay_steps;  // from --lr-wsd-decay-iters/-samples
  WsdDecayStyle lr_wsd_decay_style = WsdDecayStyle::exponential;

  double start_wd = 0.01;       // --start-weight-decay (= --weight-decay when style constant)
  double end_wd = 0.01;         // --end-weight-decay (= --weight-decay when style constant)
  int64_t wd_incr_steps = 0;    // train_iters * gbs or train_samples
  WdIncrStyle wd_incr_style = WdIncrStyle::constant;
};

// Throws mt::Error unless `config` passes Megatron's constructor asserts (min_lr >= 0,
// min_lr <= max_lr, lr_warmup_init <= max_lr, lr_decay_steps > 0, warmup < decay, WSD needs
// wsd_decay_steps, 0 <= start_wd <= end_wd, constant WD needs start == end) plus the ones
// Megatron would only hit later as a crash or a silent oddity (warmup >= 0,
// 0 <= wsd_decay_steps <= lr_decay_steps, wd_incr_steps > 0 for a WD ramp).
void validate(const LrScheduleConfig& config);

// Megatron's flags, as the option parser holds them. Exactly one of train_iters / train_samples.
struct LrScheduleFlags {
  double lr = 0.0;              // --lr
  double min_lr = 0.0;          // --min-lr
  double lr_warmup_init = 0.0;  // --lr-warmup-init
  std::string lr_decay_style = "linear";           // --lr-decay-style
  std::string lr_wsd_decay_style = "exponential";  // --lr-wsd-decay-style

  // Iteration-based training.
  std::optional<int64_t> train_iters;         // --train-iters
  std::optional<int64_t> lr_decay_iters;      // --lr-decay-iters (default: train_iters)
  int64_t lr_warmup_iters = 0;                // --lr-warmup-iters
  std::optional<int64_t> lr_wsd_decay_iters;  // --lr-wsd-decay-iters
  int64_t global_batch_size = 0;              // --global-batch-size (iteration-based only)

  // Sample-based training.
  std::optional<int64_t> train_samples;         // --train-samples
  std::optional<int64_t> lr_decay_samples;      // --lr-decay-samples (default: train_samples)
  int64_t lr_warmup_samples = 0;                // --lr-warmup-samples
  std::optional<int64_t> lr_wsd_decay_samples;  // --lr-wsd-decay-samples

  // Either mode: warmup = fraction * lr_decay_steps. Exclusive with warmup iters/samples.
  std::optional<double> lr_warmup_fraction;  // --lr-warmup-fraction

  double weight_decay = 0.01;                 // --weight-decay
  std::optional<double> start_weight_decay;   // --start-weight-decay (only with a WD ramp)
  std::optional<double> end_weight_decay;     // --end-weight-decay (only with a WD ramp)
  std::string weight_decay_incr_style = "constant";  // --weight-decay-incr-style
};

// Megatron's argument checks (arguments.py: one training mode, no mixing of iteration and sample
// flags, warmup fraction exclusive with warmup iters/samples, constant WD takes no start/end)
// followed by get_optimizer_param_scheduler's conversion to steps. Also rejects a WSD length given
// in the other mode's unit, which Megatron silently ignores. The result is validated.
LrScheduleConfig lr_schedule_config_from_flags(const LrScheduleFlags& flags);

// Learning rate and weight decay as functions of the step (sample) count. The pure functions
// lr(n) / weight_decay(n) are the core; the scheduler also carries Megatron's running num_steps
// (the only state its checkpoint needs besides the config) for callers that prefer step().
class OptimizerParamScheduler {
 public:
  // Validates `config` (see validate()).
  explicit OptimizerParamScheduler(const LrScheduleConfig& config);

  // get_lr, in order:
  //   warmup (lr_warmup_steps > 0 and n <= lr_warmup_steps):
  //       lr_warmup_init + (max_lr - lr_warmup_init) * n / lr_warmup_steps   (max_lr at n = warmup)
  //   constant style: max_lr (also after lr_decay_steps)
  //   n > lr_decay_steps: min_lr
  //   inverse-square-root: max(min_lr, max_lr * sqrt(max(warmup, 1)) / sqrt(max(n, 1)))
  //   otherwise r = (n - warmup) / (decay - warmup), lr = min_lr + coeff * (max_lr - min_lr) with
  //       linear 1 - r;  cosine (cos(pi r) + 1) / 2;
  //       WSD: 1 until decay - wsd_decay_steps, then with r' = (n - (decay - wsd)) / wsd:
  //            exponential 2 * 0.5^r' - 1, linear 1 - r', cosine (cos(pi r') + 1) / 2,
  //            minus_sqrt 1 - sqrt(r').
  // num_steps must be >= 0.
  float lr(int64_t num_steps) const;
  // The same schedule for a parameter group that overrides max_lr / min_lr (Megatron's
  // --decoupled-lr / --decoupled-min-lr groups). Warmup still starts at lr_warmup_init.
  float lr(int64_t num_steps, double group_max_lr, double group_min_lr) const;

  // get_wd: end_wd once n > wd_incr_steps or when the style is constant; otherwise with
  // r = n / wd_incr_steps: start_wd + coeff * (end_wd - start_wd), linear coeff r,
  // cosine coeff (cos(pi (1 - r)) + 1) / 2.
  float weight_decay(int64_t num_steps) const;

  // Megatron's running counter: step(increment) after each successful update.
  void step(int64_t increment);
  int64_t num_steps() const { return num_steps_; }
  void set_num_steps(int64_t num_steps);  // checkpoint restore
  float current_lr() const { return lr(num_steps_); }
  float current_weight_decay() const { return weight_decay(num_steps_); }

  const LrScheduleConfig& config() const { return config_; }

 private:
  double lr_f64(int64_t num_steps, double max_lr, double min_lr) const;

  LrScheduleConfig config_;
  int64_t num_steps_ = 0;
};

}  // namespace mt
