// Owns the implementation of Megatron's learning-rate / weight-decay schedules and of the flag
// translation into sample-counted steps; see lr_schedule.h for the semantics.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/error.h"

namespace mt {

LrDecayStyle parse_lr_decay_style(std::string_view name) {
  if (name == "constant") return LrDecayStyle::constant;
  if (name == "linear") return LrDecayStyle::linear;
  if (name == "cosine") return LrDecayStyle::cosine;
  if (name == "inverse-square-root") return LrDecayStyle::inverse_square_root;
  if (name == "WSD") return LrDecayStyle::wsd;
  MT_FAIL() << "--lr-decay-style '" << name
            << "' is not supported; choose one of constant, linear, cosine, inverse-square-root, WSD";
}

WsdDecayStyle parse_wsd_decay_style(std::string_view name) {
  if (name == "exponential") return WsdDecayStyle::exponential;
  if (name == "linear") return WsdDecayStyle::linear;
  if (name == "cosine") return WsdDecayStyle::cosine;
  if (name == "minus_sqrt") return WsdDecayStyle::minus_sqrt;
  MT_FAIL() << "--lr-wsd-decay-style '" << name
            << "' is not supported; choose one of exponential, linear, cosine, minus_sqrt";
}

WdIncrStyle parse_wd_incr_style(std::string_view name) {
  if (name == "constant") return WdIncrStyle::constant;
  if (name == "linear") return WdIncrStyle::linear;
  if (name == "cosine") return WdIncrStyle::cosine;
  MT_FAIL() << "--weight-decay-incr-style '" << name
            << "' is not supported; choose one of constant, linear, cosine";
}

std::string_view to_string(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::constant: return "constant";
    case LrDecayStyle::linear: return "linear";
    case LrDecayStyle::cosine: return "cosine";
    case LrDecayStyle::inverse_square_root: return "inverse-square-root";
    case LrDecayStyle::wsd: return "WSD";
  }
  return "?";
}

std::string_view to_string(WsdDecayStyle style) {
  switch (style) {
    case WsdDecayStyle::exponential: return "exponential";
    case WsdDecayStyle::linear: return "linear";
    case WsdDecayStyle::cosine: return "cosine";
    case WsdDecayStyle::minus_sqrt: return "minus_sqrt";
  }
  return "?";
}

std::string_view to_string(WdIncrStyle style) {
  switch (style) {
    case WdIncrStyle::constant: return "constant";
    case WdIncrStyle::linear: return "linear";
    case WdIncrStyle::cosine: return "cosine";
  }
  return "?";
}

void validate(const LrScheduleConfig& c) {
  // The asserts of OptimizerParamScheduler.__init__, in its order, with the flags to fix.
  MT_CHECK(c.min_lr >= 0.0) << "--min-lr (" << c.min_lr << ") must be >= 0";
  MT_CHECK(c.max_lr >= c.min_lr) << "--min-lr (" << c.min_lr << ") must be <= --lr (" << c.max_lr << ")";
  MT_CHECK(c.lr_warmup_init <= c.max_lr)
      << "--lr-warmup-init (" << c.lr_warmup_init << ") must be <= --lr (" << c.max_lr << ")";
  MT_CHECK(c.lr_decay_steps > 0)
      << "the LR decay length must be > 0 samples (got " << c.lr_decay_steps
      << "); set --lr-decay-iters / --lr-decay-samples (default --train-iters / --train-samples)";
  // Negative warmup would pass Megatron's check and then extrapolate above max_lr; reject it.
  MT_CHECK(c.lr_warmup_steps >= 0.0)
      << "LR warmup (" << c.lr_warmup_steps
      << " samples) must be >= 0; check --lr-warmup-iters / --lr-warmup-samples / --lr-warmup-fraction";
  MT_CHECK(c.lr_warmup_steps < static_cast<double>(c.lr_decay_steps))
      << "LR warmup (" << c.lr_warmup_steps << " samples) must be shorter than LR decay ("
      << c.lr_decay_steps << " samples); lower --lr-warmup-iters / --lr-warmup-samples / "
      << "--lr-warmup-fraction or raise --lr-decay-iters / --lr-decay-samples";
  if (c.lr_decay_style == LrDecayStyle::wsd) {
    MT_CHECK(c.wsd_decay_steps.has_value())
        << "--lr-decay-style WSD needs the anneal length: set --lr-wsd-decay-iters "
        << "(iteration-based) or --lr-wsd-decay-samples (sample-based)";
    // Megatron does not check this; an anneal longer than the decay would start the schedule
    // mid-anneal, and a negative one would run past the decay end. Neither is meaningful.
    MT_CHECK(*c.wsd_decay_steps >= 0 && *c.wsd_decay_steps <= c.lr_decay_steps)
        << "WSD anneal (" << *c.wsd_decay_steps << " samples) must lie within [0, LR decay = "
        << c.lr_decay_steps << " samples]; lower --lr-wsd-decay-iters / --lr-wsd-decay-samples";
  }
  MT_CHECK(c.start_wd >= 0.0) << "--start-weight-decay (" << c.start_wd << ") must be >= 0";
  MT_CHECK(c.end_wd >= c.start_wd)
      << "--end-weight-decay (" << c.end_wd << ") must be >= --start-weight-decay (" << c.start_wd << ")";
  if (c.wd_incr_style == WdIncrStyle::constant) {
    // Megatron asserts this inside get_wd; checking it up front fails before training starts.
    MT_CHECK(c.start_wd == c.end_wd)
        << "--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay (got "
        << c.start_wd << " and " << c.end_wd << "); use --weight-decay alone, or a linear/cosine style";
  } else {
    // Megatron would divide by zero on the first get_wd call.
    MT_CHECK(c.wd_incr_steps > 0)
        << "--weight-decay-incr-style " << to_string(c.wd_incr_style)
        << " needs a positive ramp length (train iters * global batch or --train-samples), got "
        << c.wd_incr_steps;
  }
}

LrScheduleConfig lr_schedule_config_from_flags(const LrScheduleFlags& f) {
  // Megatron tests `if args.train_iters:` / `if args.train_samples:`, so 0 counts as unset.
  const bool by_iters = f.train_iters.has_value() && *f.train_iters != 0;
  const bool by_samples = f.train_samples.has_value() && *f.train_samples != 0;
  MT_CHECK(!(by_iters && by_samples))
      << "--train-iters and --train-samples are mutually exclusive; give one of them";
  MT_CHECK(by_iters || by_samples) << "either --train-iters or --train-samples must be given";

  LrScheduleConfig c;
  c.max_lr = f.lr;
  c.min_lr = f.min_lr;
  c.lr_warmup_init = f.lr_warmup_init;
  c.lr_decay_style = parse_lr_decay_style(f.lr_decay_style);
  c.lr_wsd_decay_style = parse_wsd_decay_style(f.lr_wsd_decay_style);

  if (by_iters) {
    MT_CHECK(*f.train_iters > 0) << "--train-iters (" << *f.train_iters << ") must be > 0";
    MT_CHECK(!f.lr_decay_samples.has_value())
        << "--lr-decay-samples needs sample-based training (--train-samples); with --train-iters "
        << "use --lr-decay-iters";
    MT_CHECK(f.lr_warmup_samples == 0)
        << "--lr-warmup-samples needs sample-based training (--train-samples); with --train-iters "
        << "use --lr-warmup-iters or --lr-warmup-fraction";
    MT_CHECK(!f.lr_wsd_decay_samples.has_value())
        << "--lr-wsd-decay-samples needs sample-based training (--train-samples); with --train-iters "
        << "use --lr-wsd-decay-iters";
    MT_CHECK(!(f.lr_warmup_fraction.has_value() && f.lr_warmup_iters != 0))
        << "--lr-warmup-fraction and --lr-warmup-iters are mutually exclusive; give one of them";
    MT_CHECK(f.global_batch_size > 0)
        << "--global-batch-size (" << f.global_batch_size
        << ") must be > 0: iteration-based schedules count samples = iterations * global batch";
    const int64_t gbs = f.global_batch_size;
    const int64_t decay_iters = f.lr_decay_iters.value_or(*f.train_iters);
    c.lr_decay_steps = decay_iters * gbs;
    c.wd_incr_steps = *f.train_iters * gbs;
    if (f.lr_wsd_decay_iters) c.wsd_decay_steps = *f.lr_wsd_decay_iters * gbs;
    c.lr_warmup_steps = f.lr_warmup_fraction
                            ? *f.lr_warmup_fraction * static_cast<double>(c.lr_decay_steps)
                            : static_cast<double>(f.lr_warmup_iters * gbs);
  } else {
    MT_CHECK(*f.train_samples > 0) << "--train-samples (" << *f.train_samples << ") must be > 0";
    MT_CHECK(!f.lr_decay_iters.has_value())
        << "--lr-decay-iters needs iteration-based training (--train-iters); with --train-samples "
        << "use --lr-decay-samples";
    MT_CHECK(f.lr_warmup_iters == 0)
        << "--lr-warmup-iters needs iteration-based training (--train-iters); with --train-samples "
        << "use --lr-warmup-samples or --lr-warmup-fraction";
    MT_CHECK(!f.lr_wsd_decay_iters.has_value())
        << "--lr-wsd-decay-iters needs iteration-based training (--train-iters); with --train-samples "
        << "use --lr-wsd-decay-samples";
    MT_CHECK(!(f.lr_warmup_fraction.has_value() && f.lr_warmup_samples != 0))
        << "--lr-warmup-fraction and --lr-warmup-samples are mutually exclusive; give one of them";
    c.lr_decay_steps = f.lr_decay_samples.value_or(*f.train_samples);
    c.wd_incr_steps = *f.train_samples;
    c.wsd_decay_steps = f.lr_wsd_decay_samples;
    c.lr_warmup_steps = f.lr_warmup_fraction
                            ? *f.lr_warmup_fraction * static_cast<double>(c.lr_decay_steps)
                            : static_cast<double>(f.lr_warmup_samples);
  }

  // arguments.py: a constant WD schedule takes --weight-decay and forbids start/end; a ramp
  // requires both ends.
  c.wd_incr_style = parse_wd_incr_style(f.weight_decay_incr_style);
  if (c.wd_incr_style == WdIncrStyle::constant) {
    MT_CHECK(!f.start_weight_decay.has_value() && !f.end_weight_decay.has_value())
        << "--start-weight-decay / --end-weight-decay need --weight-decay-incr-style linear or "
        << "cosine; for a constant weight decay use --weight-decay";
    c.start_wd = f.weight_decay;
    c.end_wd = f.weight_decay;
  } else {
    MT_CHECK(f.start_weight_decay.has_value() && f.end_weight_decay.has_value())
        << "--weight-decay-incr-style " << f.weight_decay_incr_style
        << " needs both --start-weight-decay and --end-weight-decay";
    c.start_wd = *f.start_weight_decay;
    c.end_wd = *f.end_weight_decay;
  }

  validate(c);
  return c;
}

OptimizerParamScheduler::OptimizerParamScheduler(const LrScheduleConfig& config) : config_(config) {
  validate(config_);
}

double OptimizerParamScheduler::lr_f64(int64_t num_steps, double max_lr, double min_lr) const {
  MT_CHECK(num_steps >= 0) << "the LR schedule step must be >= 0, got " << num_steps;
  const LrScheduleConfig& c = config_;
  const double n = static_cast<double>(num_steps);

  // Linear warmup; inclusive at the end so n == warmup gives exactly max_lr.
  if (c.lr_warmup_steps > 0.0 && n <= c.lr_warmup_steps) {
    return c.lr_warmup_init + (max_lr - c.lr_warmup_init) * n / c.lr_warmup_steps;
  }
  // Constant is tested before the decay end, so it stays at max_lr forever (never min_lr).
  if (c.lr_decay_style == LrDecayStyle::constant) return max_lr;
  if (num_steps > c.lr_decay_steps) return min_lr;

  if (c.lr_decay_style == LrDecayStyle::inverse_square_root) {
    // Written as Megatron evaluates it: (max_lr * sqrt(w)) / sqrt(n), so the doubles match.
    const double w = std::max(c.lr_warmup_steps, 1.0);
    const double m = std::max(n, 1.0);
    return std::max(min_lr, max_lr * std::sqrt(w) / std::sqrt(m));
  }

  const double decay_ratio = (n - c.lr_warmup_steps) / (static_cast<double>(c.lr_decay_steps) - c.lr_warmup_steps);
  const double delta_lr = max_lr - min_lr;
  double coeff = 0.0;
  switch (c.lr_decay_style) {
    case LrDecayStyle::linear:
      coeff = 1.0 - decay_ratio;
      break;
    case LrDecayStyle::cosine:
      coeff = 0.5 * (std::cos(std::numbers::pi * decay_ratio) + 1.0);
      break;
    case LrDecayStyle::wsd: {
      // Stable at max_lr, then anneal over the last wsd_decay_steps of the decay window. The
      // anneal is measured from its own start, not from the end of warmup.
      const int64_t wsd = *c.wsd_decay_steps;
      const int64_t anneal_start = c.lr_decay_steps - wsd;
      if (num_steps <= anneal_start) {
        coeff = 1.0;
        break;
      }
      const double r = static_cast<double>(num_steps - anneal_start) / static_cast<double>(wsd);
      switch (c.lr_wsd_decay_style) {
        case WsdDecayStyle::linear: coeff = 1.0 - r; break;
        case WsdDecayStyle::cosine: coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0); break;
        case WsdDecayStyle::exponential: coeff = 2.0 * std::pow(0.5, r) - 1.0; break;
        case WsdDecayStyle::minus_sqrt: coeff = 1.0 - std::sqrt(r); break;
      }
      break;
    }
    case LrDecayStyle::constant:
    case LrDecayStyle::inverse_square_root:
      break;  // handled above
  }
  return min_lr + coeff * delta_lr;
}

float OptimizerParamScheduler::lr(int64_t num_steps) const {
  return static_cast<float>(lr_f64(num_steps, config_.max_lr, config_.min_lr));
}

float OptimizerParamScheduler::lr(int64_t num_steps, double group_max_lr, double group_min_lr) const {
  return static_cast<float>(lr_f64(num_steps, group_max_lr, group_min_lr));
}

float OptimizerParamScheduler::weight_decay(int64_t num_steps) const {
  MT_CHECK(num_steps >= 0) << "the weight-decay schedule step must be >= 0, got " << num_steps;
  const LrScheduleConfig& c = config_;
  if (num_steps > c.wd_incr_steps) return static_cast<float>(c.end_wd);
  if (c.wd_incr_style == WdIncrStyle::constant) return static_cast<float>(c.end_wd);
  const double incr_ratio = static_cast<double>(num_steps) / static_cast<double>(c.wd_incr_steps);
  const double delta_wd = c.end_wd - c.start_wd;
  double coeff = 0.0;
  switch (c.wd_incr_style) {
    case WdIncrStyle::linear: coeff = incr_ratio; break;
    // A rising half cosine: 0 at r = 0, 1 at r = 1.
    case WdIncrStyle::cosine: coeff = 0.5 * (std::cos(std::numbers::pi * (1.0 - incr_ratio)) + 1.0); break;
    case WdIncrStyle::constant: break;  // handled above
  }
  return static_cast<float>(c.start_wd + coeff * delta_wd);
}

void OptimizerParamScheduler::step(int64_t increment) {
  MT_CHECK(increment >= 0) << "the LR schedule advances by the samples of an iteration, got " << increment;
  num_steps_ += increment;
}

void OptimizerParamScheduler::set_num_steps(int64_t num_steps) {
  MT_CHECK(num_steps >= 0) << "restored LR schedule step must be >= 0, got " << num_steps;
  num_steps_ = num_steps;
}

}  // namespace mt
