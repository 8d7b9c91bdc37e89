// optim/loss_scaler: Megatron's dynamic loss scaler driven by scripted found_inf sequences (expected
// scale and trackers after every update), the constant scaler, checkpoint state, the flag-based
// selection, and the config checks.
#include <string>
#include <vector>

#include "base/error.h"
#include "optim/loss_scaler.h"
#include "testing.h"

namespace mt {
namespace {

struct Expect {
  bool found_inf;
  float scale;  // scale after update(found_inf)
};

void run_script(LossScaler& s, const std::vector<Expect>& script) {
  for (size_t i = 0; i < script.size(); ++i) {
    s.update(script[i].found_inf);
    EXPECT_EQ(s.scale(), script[i].scale) << "after update " << i + 1 << " (found_inf "
                                          << script[i].found_inf << ")";
  }
}

DynamicLossScaleConfig small_config() {
  DynamicLossScaleConfig c;
  c.initial_scale = 1024.0;
  c.min_scale = 1.0;
  c.growth_interval = 3;
  c.hysteresis = 2;
  return c;
}

TEST(LossScaler, DefaultsAreMegatrons) {
  const LossScaler s = LossScaler::make_dynamic({});
  EXPECT_EQ(s.mode(), LossScaleMode::dynamic);
  EXPECT_EQ(s.scale(), 4294967296.0f);         // 2^32
  EXPECT_EQ(s.inv_scale(), 1.0f / 4294967296.0f);  // 2^-32, exact
  EXPECT_EQ(s.state().hysteresis_tracker, 2);
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.dynamic_config().growth_interval, 1000);
  EXPECT_EQ(s.dynamic_config().growth_factor, 2.0);
  EXPECT_EQ(s.dynamic_config().backoff_factor, 0.5);
}

TEST(LossScaler, HysteresisThenBackoff) {
  LossScaler s = LossScaler::make_dynamic(small_config());
  run_script(s, {
                    {true, 1024.0f},  // hysteresis 2 -> 1: tolerated
                    {true, 512.0f},   // 1 -> 0: back off, 1024 * 0.5
                    {true, 256.0f},   // 0 -> -1: spent, every further inf backs off
                    {false, 256.0f},  // growth 1
                    {false, 256.0f},  // growth 2
                    {false, 512.0f},  // growth 3 == window: * 2, hysteresis re-armed to 2
                    {true, 512.0f},   // 2 -> 1: tolerated again
                });
  EXPECT_EQ(s.state().hysteresis_tracker, 1);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(LossScaler, CleanStepDoesNotRearmHysteresis) {
  // Megatron's hysteresis is not about consecutive infs: only growth resets the tracker.
  LossScaler s = LossScaler::make_dynamic(small_config());
  run_script(s, {
                    {true, 1024.0f},  // tracker 1
                    {false, 1024.0f}, // growth 1, tracker stays 1
                    {true, 512.0f},   // tracker 0: backs off although the infs were not adjacent
                });
}

TEST(LossScaler, InfResetsGrowthWindow) {
  LossScaler s = LossScaler::make_dynamic(small_config());
  run_script(s, {
                    {false, 1024.0f},
                    {false, 1024.0f},  // growth 2 of 3
                    {true, 1024.0f},   // growth tracker back to 0 (hysteresis 2 -> 1 absorbs it)
                    {false, 1024.0f},
                    {false, 1024.0f},  // only 2 clean since the inf
                    {false, 2048.0f},  // 3 clean: grow
                    {false, 2048.0f},
                    {false, 2048.0f},
                    {false, 4096.0f},  // and again after another full window
                });
}

TEST(LossScaler, GrowthAfterDefaultWindow) {
  LossScaler s = LossScaler::make_dynamic({});
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4294967296.0f);  // 999 clean steps: not yet
  EXPECT_EQ(s.state().growth_tracker, 999);
  s.update(false);
  EXPECT_EQ(s.scale(), 8589934592.0f);  // 1000th: 2^33
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(LossScaler, NeverBelowMinScale) {
  DynamicLossScaleConfig c;
  c.initial_scale = 4.0;
  c.min_scale = 1.0;
  c.hysteresis = 1;
  LossScaler s = LossScaler::make_dynamic(c);
  run_script(s, {{true, 2.0f}, {true, 1.0f}, {true, 1.0f}, {true, 1.0f}});

  // A floor that is not a power of two: max(4 * 0.5, 3) = 3, max(3 * 0.5, 3) = 3.
  c.min_scale = 3.0;
  LossScaler t = LossScaler::make_dynamic(c);
  run_script(t, {{true, 3.0f}, {true, 3.0f}});
}

TEST(LossScaler, ConstantNeverChanges) {
  LossScaler s = LossScaler::make_constant(128.0);
  EXPECT_EQ(s.mode(), LossScaleMode::constant);
  run_script(s, {{true, 128.0f}, {true, 128.0f}, {true, 128.0f}, {false, 128.0f}});
  EXPECT_EQ(s.inv_scale(), 0.0078125f);  // 1 / 128
  EXPECT_THROW(LossScaler::make_constant(0.0), Error);
  EXPECT_THROW(LossScaler::make_constant(-2.0), Error);
}

TEST(LossScaler, StateRoundTrip) {
  LossScaler a = LossScaler::make_dynamic(small_config());
  a.update(true);
  a.update(true);   // 512, tracker 0
  a.update(false);  // growth 1
  const LossScalerState st = a.state();
  EXPECT_EQ(st.scale, 512.0f);
  EXPECT_EQ(st.growth_tracker, 1);
  EXPECT_EQ(st.hysteresis_tracker, 0);

  LossScaler b = LossScaler::make_dynamic(small_config());
  b.load_state(st);
  // Both continue identically: 2 more clean steps grow, then one inf backs off (re-armed to 2 -> 1,
  // so it does not) and a second one does.
  for (bool inf : {false, false, true, true}) {
    a.update(inf);
    b.update(inf);
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_EQ(b.scale(), 512.0f);  // 512 -> 1024 (growth) -> 1024 (tolerated) -> 512

  LossScalerState bad = st;
  bad.scale = 0.0f;
  EXPECT_THROW(b.load_state(bad), Error);
  bad = st;
  bad.growth_tracker = 3;  // == window: would never grow again
  EXPECT_THROW(b.load_state(bad), Error);
}

TEST(LossScaler, SelectionFromFlags) {
  LossScaleFlags f;
  f.fp16 = true;
  auto s = loss_scaler_from_flags(f);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->mode(), LossScaleMode::dynamic);
  EXPECT_EQ(s->scale(), 4294967296.0f);

  f.loss_scale = 0.0;  // Megatron's `if loss_scale:` treats 0 as not given
  EXPECT_EQ(loss_scaler_from_flags(f)->mode(), LossScaleMode::dynamic);

  f.loss_scale = 65536.0;
  s = loss_scaler_from_flags(f);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->mode(), LossScaleMode::constant);
  EXPECT_EQ(s->scale(), 65536.0f);

  LossScaleFlags b;
  b.bf16 = true;
  EXPECT_FALSE(loss_scaler_from_flags(b).has_value());  // bf16 needs no scaler
  b.loss_scale = 4.0;
  EXPECT_EQ(loss_scaler_from_flags(b)->mode(), LossScaleMode::constant);

  LossScaleFlags fp32;
  fp32.loss_scale = 4.0;
  EXPECT_FALSE(loss_scaler_from_flags(fp32).has_value());  // fp32 without distributed optimizer
  fp32.use_distributed_optimizer = true;
  EXPECT_EQ(loss_scaler_from_flags(fp32)->mode(), LossScaleMode::constant);

  LossScaleFlags d;
  d.fp16 = true;
  d.initial_loss_scale = 256.0;
  d.min_loss_scale = 2.0;
  d.loss_scale_window = 7;
  d.hysteresis = 3;
  const LossScaler ds = *loss_scaler_from_flags(d);
  EXPECT_EQ(ds.scale(), 256.0f);
  EXPECT_EQ(ds.dynamic_config().min_scale, 2.0);
  EXPECT_EQ(ds.dynamic_config().growth_interval, 7);
  EXPECT_EQ(ds.state().hysteresis_tracker, 3);
}

TEST(LossScaler, BadConfigsNameTheFlag) {
  auto expect_error_naming = [](DynamicLossScaleConfig c, const std::string& needle) {
    try {
      LossScaler::make_dynamic(c);
      ADD_FAILURE() << "expected mt::Error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  DynamicLossScaleConfig c;
  c.hysteresis = 0;
  expect_error_naming(c, "--hysteresis");
  c = {};
  c.growth_interval = 0;
  expect_error_naming(c, "--loss-scale-window");
  c = {};
  c.min_scale = 0.0;
  expect_error_naming(c, "--min-loss-scale");
  c = {};
  c.initial_scale = 0.5;  // below the default min of 1
  expect_error_naming(c, "--initial-loss-scale");
  c = {};
  c.backoff_factor = 1.0;
  expect_error_naming(c, "backoff");
  c = {};
  c.growth_factor = 1.0;
  expect_error_naming(c, "growth");

  LossScaleFlags both;
  both.fp16 = both.bf16 = true;
  EXPECT_THROW(loss_scaler_from_flags(both), Error);
}

}  // namespace
}  // namespace mt
