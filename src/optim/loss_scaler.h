// Owns fp16 loss scaling: Megatron-LM's ConstantGradScaler and DynamicGradScaler
// (megatron/core/optimizer/grad_scaler.py) as one LossScaler with a mode, and the choice between
// them from Megatron's flags (megatron/core/optimizer/__init__.py, the "Grad scaler" block).
//
// How the trainer uses it (megatron/core/optimizer/optimizer.py, MixedPrecisionOptimizer):
// the loss is multiplied by scale() before backward; the fp32 main grads are multiplied by
// inv_scale() and checked for inf/nan (found_inf is OR-reduced over the model-parallel ranks);
// update(found_inf) runs every iteration, in either mode; when found_inf the optimizer step is
// skipped and the LR schedule is not advanced. A constant scaler therefore still skips steps.
//
// Numerics follow Megatron's: the scale lives in a float32 (a torch.float tensor there), every
// growth/backoff multiplies in float32, and inv_scale is 1/scale computed in double, then rounded.
// There is no upper clamp: Megatron lets the scale grow without bound.
#pragma once

#include <cstdint>
#include <optional>

namespace mt {

// DynamicGradScaler's constructor arguments; defaults are Megatron's flag defaults.
struct DynamicLossScaleConfig {
  double initial_scale = 4294967296.0;  // --initial-loss-scale (2^32)
  double min_scale = 1.0;               // --min-loss-scale
  double growth_factor = 2.0;           // fixed in Megatron (no flag)
  double backoff_factor = 0.5;          // fixed in Megatron (no flag)
  int64_t growth_interval = 1000;       // --loss-scale-window
  int64_t hysteresis = 2;               // --hysteresis
};

enum class LossScaleMode { constant, dynamic };

// What a checkpoint stores (Megatron's state_dict keys: scale, growth_tracker,
// hysteresis_tracker). A constant scaler stores nothing in Megatron; we keep the same struct.
struct LossScalerState {
  float scale = 1.0f;
  int64_t growth_tracker = 0;      // clean iterations since the last growth or inf
  int64_t hysteresis_tracker = 0;  // infs still tolerated before backing off; may go negative
};

class LossScaler {
 public:
  // --loss-scale X: a fixed scale (> 0); update() is a no-op.
  static LossScaler make_constant(double scale);
  // Dynamic scaling; throws mt::Error unless Megatron's asserts hold: initial_scale > 0,
  // 0 < min_scale <= initial_scale, growth_factor > 1, 0 < backoff_factor < 1,
  // growth_interval > 0, hysteresis > 0.
  static LossScaler make_dynamic(const DynamicLossScaleConfig& config);

  LossScaleMode mode() const { return mode_; }
  float scale() const { return state_.scale; }
  float inv_scale() const;

  // DynamicGradScaler.update:
  //   found_inf: growth_tracker = 0; --hysteresis_tracker; if hysteresis_tracker <= 0,
  //              scale = max(scale * backoff_factor, min_scale).
  //   clean:     ++growth_tracker; when it reaches growth_interval: growth_tracker = 0,
  //              hysteresis_tracker = hysteresis, scale *= growth_factor.
  // Only growth re-arms the hysteresis: a clean step between two infs does not, so with
  // hysteresis 2 the pattern inf, clean, inf backs off on the second inf, and once the tracker is
  // spent every further inf backs off until the next growth.
  void update(bool found_inf);

  LossScalerState state() const { return state_; }
  // Restores a checkpoint taken from a scaler of the same mode (ignored for constant, as in
  // Megatron). Throws on a non-positive scale.
  void load_state(const LossScalerState& state);

  const DynamicLossScaleConfig& dynamic_config() const { return config_; }

 private:
  LossScaler() = default;

  LossScaleMode mode_ = LossScaleMode::constant;
  DynamicLossScaleConfig config_;
  LossScalerState state_;
};

// Megatron's selection: --loss-scale given (and nonzero) with fp16, bf16 or the distributed
// optimizer: constant; otherwise fp16: dynamic; otherwise (bf16/fp32): no scaler, no inf check.
struct LossScaleFlags {
  bool fp16 = false;                        // --fp16
  bool bf16 = false;                        // --bf16
  bool use_distributed_optimizer = false;   // --use-distributed-optimizer
  std::optional<double> loss_scale;         // --loss-scale
  double initial_loss_scale = 4294967296.0; // --initial-loss-scale
  double min_loss_scale = 1.0;              // --min-loss-scale
  int64_t loss_scale_window = 1000;         // --loss-scale-window
  int64_t hysteresis = 2;                   // --hysteresis
};
std::optional<LossScaler> loss_scaler_from_flags(const LossScaleFlags& flags);

}  // namespace mt
