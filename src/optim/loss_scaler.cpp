// Owns the implementation of Megatron's constant and dynamic loss scalers; see loss_scaler.h.
#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace mt {

LossScaler LossScaler::make_constant(double scale) {
  MT_CHECK(scale > 0.0 && std::isfinite(scale)) << "--loss-scale (" << scale << ") must be a finite value > 0";
  LossScaler s;
  s.mode_ = LossScaleMode::constant;
  s.state_.scale = static_cast<float>(scale);
  return s;
}

LossScaler LossScaler::make_dynamic(const DynamicLossScaleConfig& c) {
  MT_CHECK(c.initial_scale > 0.0 && std::isfinite(static_cast<float>(c.initial_scale)))
      << "--initial-loss-scale (" << c.initial_scale << ") must be > 0 and fit in float32";
  MT_CHECK(c.min_scale > 0.0) << "--min-loss-scale (" << c.min_scale << ") must be > 0";
  MT_CHECK(c.min_scale <= c.initial_scale)
      << "--min-loss-scale (" << c.min_scale << ") must be <= --initial-loss-scale (" << c.initial_scale << ")";
  MT_CHECK(c.growth_factor > 1.0) << "loss-scale growth factor (" << c.growth_factor << ") must be > 1";
  MT_CHECK(c.backoff_factor > 0.0 && c.backoff_factor < 1.0)
      << "loss-scale backoff factor (" << c.backoff_factor << ") must be in (0, 1)";
  MT_CHECK(c.growth_interval > 0) << "--loss-scale-window (" << c.growth_interval << ") must be > 0";
  MT_CHECK(c.hysteresis > 0) << "--hysteresis (" << c.hysteresis << ") must be > 0";
  LossScaler s;
  s.mode_ = LossScaleMode::dynamic;
  s.config_ = c;
  s.state_.scale = static_cast<float>(c.initial_scale);
  s.state_.growth_tracker = 0;
  s.state_.hysteresis_tracker = c.hysteresis;
  return s;
}

float LossScaler::inv_scale() const {
  // Megatron: scale.double().reciprocal().float().
  return static_cast<float>(1.0 / static_cast<double>(state_.scale));
}

void LossScaler::update(bool found_inf) {
  if (mode_ == LossScaleMode::constant) return;
  // Megatron keeps the factors and the floor as float32 tensors, so the products are float32.
  const float backoff = static_cast<float>(config_.backoff_factor);
  const float growth = static_cast<float>(config_.growth_factor);
  const float floor = static_cast<float>(config_.min_scale);
  if (found_inf) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker -= 1;
    if (state_.hysteresis_tracker <= 0) state_.scale = std::max(state_.scale * backoff, floor);
  } else {
    state_.growth_tracker += 1;
    if (state_.growth_tracker == config_.growth_interval) {
      state_.growth_tracker = 0;
      state_.hysteresis_tracker = config_.hysteresis;
      state_.scale = state_.scale * growth;
    }
  }
}

void LossScaler::load_state(const LossScalerState& state) {
  if (mode_ == LossScaleMode::constant) return;  // Megatron's ConstantGradScaler has no state
  MT_CHECK(state.scale > 0.0f) << "checkpointed loss scale (" << state.scale << ") must be > 0";
  MT_CHECK(state.growth_tracker >= 0 && state.growth_tracker < config_.growth_interval)
      << "checkpointed loss-scale growth tracker (" << state.growth_tracker << ") must be in [0, "
      << "--loss-scale-window = " << config_.growth_interval << "); a smaller window than the "
      << "checkpoint's would never trigger growth again (Megatron compares with ==)";
  state_ = state;
}

std::optional<LossScaler> loss_scaler_from_flags(const LossScaleFlags& f) {
  MT_CHECK(!(f.fp16 && f.bf16)) << "--fp16 and --bf16 are mutually exclusive";
  // Megatron tests `if config.loss_scale:`, so --loss-scale 0 means "not given".
  const bool has_constant = f.loss_scale.has_value() && *f.loss_scale != 0.0;
  if (f.fp16 || f.bf16 || f.use_distributed_optimizer) {
    if (has_constant) return LossScaler::make_constant(*f.loss_scale);
    if (f.fp16) {
      DynamicLossScaleConfig c;
      c.initial_scale = f.initial_loss_scale;
      c.min_scale = f.min_loss_scale;
      c.growth_interval = f.loss_scale_window;
      c.hysteresis = f.hysteresis;
      return LossScaler::make_dynamic(c);
    }
  }
  return std::nullopt;
}

}  // namespace mt
