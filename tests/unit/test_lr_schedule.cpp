// optim/lr_schedule: Megatron's LR and weight-decay schedules at chosen steps against values worked
// out by hand from the formulas (the arithmetic is in the comment next to each literal), the
// iteration/sample step accounting, and the config checks naming the flags to fix.
#include <string>

#include "base/error.h"
#include "optim/lr_schedule.h"
#include "testing.h"

namespace mt {
namespace {

// Tolerance for values that are exact in double but rounded to float by lr().
constexpr float kTol = 1e-6f;

// max_lr 1, min_lr 0.1, warmup 100, decay 1100: the decay window (decay - warmup) is 1000 steps, so
// r = (n - 100) / 1000 and lr = 0.1 + coeff * 0.9.
LrScheduleConfig base_config(LrDecayStyle style) {
  LrScheduleConfig c;
  c.max_lr = 1.0;
  c.min_lr = 0.1;
  c.lr_warmup_steps = 100;
  c.lr_decay_steps = 1100;
  c.lr_decay_style = style;
  c.start_wd = c.end_wd = 0.01;
  c.wd_incr_steps = 1000;
  return c;
}

// Runs `fn`, expects mt::Error whose message contains `needle` (the flag the user must fix).
template <typename Fn>
void expect_error_naming(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected mt::Error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}

TEST(LrSchedule, WarmupBeginMiddleEnd) {
  const OptimizerParamScheduler s(base_config(LrDecayStyle::linear));
  EXPECT_FLOAT_EQ(s.lr(0), 0.0f);     // init 0 + (1 - 0) * 0 / 100
  EXPECT_NEAR(s.lr(25), 0.25f, kTol);  // 1 * 25 / 100
  EXPECT_NEAR(s.lr(50), 0.5f, kTol);   // 1 * 50 / 100
  EXPECT_FLOAT_EQ(s.lr(100), 1.0f);   // n == warmup is still warmup: exactly max_lr
  // First decay step: r = 1 / 1000, lr = 0.1 + 0.999 * 0.9 = 0.9991.
  EXPECT_NEAR(s.lr(101), 0.9991f, kTol);
}

TEST(LrSchedule, WarmupFromInit) {
  LrScheduleConfig c = base_config(LrDecayStyle::linear);
  c.lr_warmup_init = 0.2;
  const OptimizerParamScheduler s(c);
  EXPECT_FLOAT_EQ(s.lr(0), 0.2f);    // starts at --lr-warmup-init
  EXPECT_NEAR(s.lr(50), 0.6f, kTol);  // 0.2 + (1 - 0.2) * 50 / 100 = 0.6
  EXPECT_FLOAT_EQ(s.lr(100), 1.0f);  // 0.2 + 0.8 * 1
}

TEST(LrSchedule, Linear) {
  const OptimizerParamScheduler s(base_config(LrDecayStyle::linear));
  EXPECT_NEAR(s.lr(350), 0.775f, kTol);  // r = 250/1000 = 0.25: 0.1 + 0.75 * 0.9 = 0.775
  EXPECT_NEAR(s.lr(600), 0.55f, kTol);   // r = 0.5: 0.1 + 0.5 * 0.9 = 0.55
  EXPECT_NEAR(s.lr(1100), 0.1f, kTol);   // r = 1: min_lr
  EXPECT_FLOAT_EQ(s.lr(1101), 0.1f);     // after the decay end: min_lr
  EXPECT_FLOAT_EQ(s.lr(1000000), 0.1f);
}

TEST(LrSchedule, Cosine) {
  const OptimizerParamScheduler s(base_config(LrDecayStyle::cosine));
  // r = 0.25: coeff = (cos(pi/4) + 1) / 2 = (0.70710678 + 1) / 2 = 0.85355339;
  // lr = 0.1 + 0.85355339 * 0.9 = 0.86819805.
  EXPECT_NEAR(s.lr(350), 0.86819805f, kTol);
  EXPECT_NEAR(s.lr(600), 0.55f, kTol);  // r = 0.5: coeff (0 + 1) / 2 = 0.5
  // r = 0.75: coeff = (cos(3pi/4) + 1) / 2 = 0.14644661; lr = 0.1 + 0.13180195 = 0.23180195.
  EXPECT_NEAR(s.lr(850), 0.23180195f, kTol);
  EXPECT_NEAR(s.lr(1100), 0.1f, kTol);  // r = 1: coeff 0
  EXPECT_FLOAT_EQ(s.lr(5000), 0.1f);
}

TEST(LrSchedule, ConstantKeepsMaxAfterDecayEndButStillWarmsUp) {
  const OptimizerParamScheduler s(base_config(LrDecayStyle::constant));
  EXPECT_NEAR(s.lr(50), 0.5f, kTol);  // warmup applies to constant too
  EXPECT_FLOAT_EQ(s.lr(600), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(1100), 1.0f);
  EXPECT_FLOAT_EQ(s.lr(50000), 1.0f);  // constant is tested before "past decay end -> min_lr"
}

TEST(LrSchedule, InverseSquareRoot) {
  LrScheduleConfig c = base_config(LrDecayStyle::inverse_square_root);
  c.lr_decay_steps = 100000;
  const OptimizerParamScheduler s(c);
  EXPECT_NEAR(s.lr(50), 0.5f, kTol);        // warmup as usual
  EXPECT_FLOAT_EQ(s.lr(100), 1.0f);         // warmup end
  EXPECT_NEAR(s.lr(400), 0.5f, kTol);       // 1 * sqrt(100) / sqrt(400) = 10 / 20
  EXPECT_NEAR(s.lr(1600), 0.25f, kTol);     // 10 / 40
  EXPECT_FLOAT_EQ(s.lr(40000), 0.1f);       // 10 / 200 = 0.05 < min_lr: clamped to 0.1
  EXPECT_FLOAT_EQ(s.lr(100001), 0.1f);      // past decay end: min_lr

  // Without warmup both the warmup length and n are floored at 1.
  c.lr_warmup_steps = 0;
  c.min_lr = 0.0;
  const OptimizerParamScheduler s0(c);
  EXPECT_FLOAT_EQ(s0.lr(0), 1.0f);         // 1 * sqrt(1) / sqrt(max(0, 1))
  EXPECT_FLOAT_EQ(s0.lr(1), 1.0f);
  EXPECT_NEAR(s0.lr(4), 0.5f, kTol);        // 1 / sqrt(4)
  EXPECT_NEAR(s0.lr(100), 0.1f, kTol);      // 1 / 10
}

TEST(LrSchedule, InverseSquareRootPastDecayEndIsMinLr) {
  // Megatron checks "past decay end" before the inverse-sqrt branch, so lr drops to min_lr even
  // though the formula would give more: 1 * 10 / sqrt(1101) = 0.301 > 0.1.
  const OptimizerParamScheduler s(base_config(LrDecayStyle::inverse_square_root));
  EXPECT_NEAR(s.lr(1100), 0.30151134f, kTol);  // 10 / sqrt(1100) = 10 / 33.1662479 = 0.30151134
  EXPECT_FLOAT_EQ(s.lr(1101), 0.1f);
}

// WSD with wsd_decay_steps 400: anneal starts at 1100 - 400 = 700; r' = (n - 700) / 400.
LrScheduleConfig wsd_config(WsdDecayStyle anneal) {
  LrScheduleConfig c = base_config(LrDecayStyle::wsd);
  c.wsd_decay_steps = 400;
  c.lr_wsd_decay_style = anneal;
  return c;
}

TEST(LrSchedule, WsdStablePhase) {
  const OptimizerParamScheduler s(wsd_config(WsdDecayStyle::linear));
  EXPECT_NEAR(s.lr(50), 0.5f, kTol);  // warmup
  EXPECT_FLOAT_EQ(s.lr(101), 1.0f);  // stable right after warmup
  EXPECT_FLOAT_EQ(s.lr(700), 1.0f);  // n == anneal start is still stable
  EXPECT_FLOAT_EQ(s.lr(1101), 0.1f); // past decay end
}

TEST(LrSchedule, WsdAnnealOverlappingWarmup) {
  // Megatron allows the anneal to start before warmup ends (here at 1100 - 1050 = 50). This is the
  // one case where "n <= warmup" (inclusive) is observable: at n = 100 warmup wins with max_lr,
  // while the anneal formula would give r' = 50/1050, 0.1 + (1 - 0.04761905) * 0.9 = 0.95714286.
  LrScheduleConfig c = wsd_config(WsdDecayStyle::linear);
  c.wsd_decay_steps = 1050;
  const OptimizerParamScheduler s(c);
  EXPECT_FLOAT_EQ(s.lr(100), 1.0f);
  // n = 101: r' = 51/1050 = 0.04857143; 0.1 + 0.95142857 * 0.9 = 0.95628571 (a jump down).
  EXPECT_NEAR(s.lr(101), 0.95628571f, kTol);
}

TEST(LrSchedule, WsdLinear) {
  const OptimizerParamScheduler s(wsd_config(WsdDecayStyle::linear));
  EXPECT_NEAR(s.lr(800), 0.775f, kTol);  // r' = 0.25: 0.1 + 0.75 * 0.9
  EXPECT_NEAR(s.lr(900), 0.55f, kTol);   // r' = 0.5:  0.1 + 0.5 * 0.9
  EXPECT_NEAR(s.lr(1100), 0.1f, kTol);   // r' = 1
}

TEST(LrSchedule, WsdCosine) {
  const OptimizerParamScheduler s(wsd_config(WsdDecayStyle::cosine));
  EXPECT_NEAR(s.lr(800), 0.86819805f, kTol);  // r' = 0.25: 0.1 + 0.85355339 * 0.9
  EXPECT_NEAR(s.lr(900), 0.55f, kTol);
  EXPECT_NEAR(s.lr(1100), 0.1f, kTol);
}

TEST(LrSchedule, WsdExponential) {
  const OptimizerParamScheduler s(wsd_config(WsdDecayStyle::exponential));
  // r' = 0.25: 0.5^0.25 = 0.84089642; coeff = 2 * 0.84089642 - 1 = 0.68179283;
  // lr = 0.1 + 0.68179283 * 0.9 = 0.71361355.
  EXPECT_NEAR(s.lr(800), 0.71361355f, kTol);
  // r' = 0.5: 0.5^0.5 = 0.70710678; coeff = 0.41421356; lr = 0.1 + 0.37279221 = 0.47279221.
  EXPECT_NEAR(s.lr(900), 0.47279221f, kTol);
  EXPECT_NEAR(s.lr(1100), 0.1f, kTol);  // r' = 1: 2 * 0.5 - 1 = 0
}

TEST(LrSchedule, WsdMinusSqrt) {
  const OptimizerParamScheduler s(wsd_config(WsdDecayStyle::minus_sqrt));
  EXPECT_NEAR(s.lr(800), 0.55f, kTol);  // r' = 0.25: coeff 1 - 0.5 = 0.5
  EXPECT_NEAR(s.lr(956), 0.28f, kTol);  // r' = 256/400 = 0.64: coeff 1 - 0.8 = 0.2; 0.1 + 0.18
  EXPECT_NEAR(s.lr(1100), 0.1f, kTol);
}

TEST(LrSchedule, DecoupledGroupOverridesMaxAndMin) {
  // A --decoupled-lr group: warmup still starts at lr_warmup_init (0) but climbs to the group's max.
  const OptimizerParamScheduler s(base_config(LrDecayStyle::linear));
  EXPECT_NEAR(s.lr(50, 2.0, 0.0), 1.0f, kTol);   // 0 + 2 * 50 / 100
  EXPECT_NEAR(s.lr(600, 2.0, 0.0), 1.0f, kTol);  // r = 0.5: 0 + 0.5 * 2
  EXPECT_FLOAT_EQ(s.lr(2000, 2.0, 0.5), 0.5f);   // past decay end: the group's min
}

TEST(LrSchedule, RunningCounterMatchesPureFunction) {
  OptimizerParamScheduler s(base_config(LrDecayStyle::cosine));
  EXPECT_EQ(s.num_steps(), 0);
  s.step(350);
  EXPECT_EQ(s.num_steps(), 350);
  EXPECT_FLOAT_EQ(s.current_lr(), s.lr(350));
  s.set_num_steps(850);
  EXPECT_NEAR(s.current_lr(), 0.23180195f, kTol);
  EXPECT_THROW(s.lr(-1), Error);
  EXPECT_THROW(s.step(-8), Error);
}

TEST(WeightDecay, Linear) {
  LrScheduleConfig c = base_config(LrDecayStyle::linear);
  c.start_wd = 0.0;
  c.end_wd = 0.1;
  c.wd_incr_style = WdIncrStyle::linear;
  const OptimizerParamScheduler s(c);
  EXPECT_FLOAT_EQ(s.weight_decay(0), 0.0f);
  EXPECT_NEAR(s.weight_decay(250), 0.025f, kTol);  // 0 + 0.25 * 0.1
  EXPECT_NEAR(s.weight_decay(1000), 0.1f, kTol);   // r = 1
  EXPECT_FLOAT_EQ(s.weight_decay(1001), 0.1f);     // past the ramp: end_wd
}

TEST(WeightDecay, Cosine) {
  LrScheduleConfig c = base_config(LrDecayStyle::linear);
  c.start_wd = 0.0;
  c.end_wd = 0.1;
  c.wd_incr_style = WdIncrStyle::cosine;
  const OptimizerParamScheduler s(c);
  EXPECT_NEAR(s.weight_decay(0), 0.0f, kTol);  // (cos(pi) + 1) / 2 = 0
  // r = 0.25: coeff = (cos(0.75 pi) + 1) / 2 = 0.14644661 -> 0.014644661.
  EXPECT_NEAR(s.weight_decay(250), 0.014644661f, kTol);
  EXPECT_NEAR(s.weight_decay(500), 0.05f, kTol);
  // r = 0.75: coeff = (cos(0.25 pi) + 1) / 2 = 0.85355339 -> 0.085355339.
  EXPECT_NEAR(s.weight_decay(750), 0.085355339f, kTol);
  EXPECT_NEAR(s.weight_decay(1000), 0.1f, kTol);
}

TEST(WeightDecay, Constant) {
  LrScheduleConfig c = base_config(LrDecayStyle::linear);
  c.start_wd = c.end_wd = 0.05;
  const OptimizerParamScheduler s(c);
  EXPECT_FLOAT_EQ(s.weight_decay(0), 0.05f);
  EXPECT_FLOAT_EQ(s.weight_decay(500), 0.05f);
  EXPECT_FLOAT_EQ(s.weight_decay(5000), 0.05f);
}

TEST(LrSchedule, IterationFlagsCountSamples) {
  LrScheduleFlags f;
  f.lr = 1.0;
  f.train_iters = 1000;
  f.lr_warmup_iters = 10;
  f.global_batch_size = 8;
  f.weight_decay = 0.1;
  const LrScheduleConfig c = lr_schedule_config_from_flags(f);
  EXPECT_EQ(c.lr_decay_steps, 8000);  // lr_decay_iters defaults to train_iters: 1000 * 8
  EXPECT_EQ(c.lr_warmup_steps, 80.0);  // 10 * 8
  EXPECT_EQ(c.wd_incr_steps, 8000);   // train_iters * 8
  EXPECT_FALSE(c.wsd_decay_steps.has_value());
  EXPECT_EQ(c.start_wd, 0.1);
  EXPECT_EQ(c.end_wd, 0.1);

  // Megatron's loop: iteration i updates with the lr set by the previous increments, then
  // advances by the global batch. So iteration 1 runs at lr_warmup_init (0) and iteration
  // warmup_iters + 1 = 11 is the first at max_lr.
  OptimizerParamScheduler s(c);
  std::vector<float> used;
  for (int it = 1; it <= 11; ++it) {
    used.push_back(s.current_lr());
    s.step(f.global_batch_size);
  }
  EXPECT_FLOAT_EQ(used[0], 0.0f);          // iteration 1: lr(0)
  EXPECT_NEAR(used[5], 0.5f, kTol);        // iteration 6: lr(40) = 40 / 80
  EXPECT_FLOAT_EQ(used[10], 1.0f);         // iteration 11: lr(80) = warmup end

  f.lr_decay_iters = 500;
  f.lr_wsd_decay_iters = 100;
  f.lr_decay_style = "WSD";
  const LrScheduleConfig w = lr_schedule_config_from_flags(f);
  EXPECT_EQ(w.lr_decay_steps, 4000);  // 500 * 8
  EXPECT_EQ(w.wd_incr_steps, 8000);   // still train_iters * 8
  ASSERT_TRUE(w.wsd_decay_steps.has_value());
  EXPECT_EQ(*w.wsd_decay_steps, 800);  // 100 * 8
  EXPECT_EQ(w.lr_decay_style, LrDecayStyle::wsd);
}

TEST(LrSchedule, WarmupFractionIsNotRounded) {
  LrScheduleFlags f;
  f.lr = 1.0;
  f.train_iters = 150;
  f.global_batch_size = 1;
  f.lr_warmup_fraction = 0.01;
  const LrScheduleConfig c = lr_schedule_config_from_flags(f);
  EXPECT_DOUBLE_EQ(c.lr_warmup_steps, 1.5);  // 0.01 * 150, kept fractional as in Megatron
  const OptimizerParamScheduler s(c);
  EXPECT_NEAR(s.lr(1), 0.66666667f, kTol);   // 1 <= 1.5: warmup, 1 * 1 / 1.5
  // n = 2 > 1.5: linear decay with r = (2 - 1.5) / (150 - 1.5) = 0.5 / 148.5 = 0.003367003;
  // lr = 1 - 0.003367003 = 0.996632997.
  EXPECT_NEAR(s.lr(2), 0.996633f, kTol);
}

TEST(LrSchedule, SampleFlagsUsedAsIs) {
  LrScheduleFlags f;
  f.lr = 3e-4;
  f.min_lr = 3e-5;
  f.train_samples = 10000;
  f.lr_decay_samples = 8000;
  f.lr_warmup_samples = 500;
  f.lr_wsd_decay_samples = 2000;
  f.lr_decay_style = "WSD";
  f.lr_wsd_decay_style = "minus_sqrt";
  f.weight_decay_incr_style = "linear";
  f.start_weight_decay = 0.0;
  f.end_weight_decay = 0.1;
  const LrScheduleConfig c = lr_schedule_config_from_flags(f);
  EXPECT_EQ(c.lr_decay_steps, 8000);
  EXPECT_EQ(c.lr_warmup_steps, 500.0);
  EXPECT_EQ(c.wd_incr_steps, 10000);  // train_samples
  EXPECT_EQ(*c.wsd_decay_steps, 2000);
  EXPECT_EQ(c.lr_wsd_decay_style, WsdDecayStyle::minus_sqrt);
  EXPECT_EQ(c.wd_incr_style, WdIncrStyle::linear);

  f.lr_warmup_samples = 0;
  f.lr_warmup_fraction = 0.1;
  EXPECT_EQ(lr_schedule_config_from_flags(f).lr_warmup_steps, 800.0);  // 0.1 * lr_decay_samples

  f.lr_decay_samples.reset();
  EXPECT_EQ(lr_schedule_config_from_flags(f).lr_decay_steps, 10000);  // defaults to train_samples
}

TEST(LrSchedule, StyleNamesRoundTrip) {
  for (const char* n : {"constant", "linear", "cosine", "inverse-square-root", "WSD"})
    EXPECT_EQ(to_string(parse_lr_decay_style(n)), n);
  for (const char* n : {"exponential", "linear", "cosine", "minus_sqrt"})
    EXPECT_EQ(to_string(parse_wsd_decay_style(n)), n);
  for (const char* n : {"constant", "linear", "cosine"}) EXPECT_EQ(to_string(parse_wd_incr_style(n)), n);
  expect_error_naming([] { parse_lr_decay_style("wsd"); }, "--lr-decay-style");  // case matters
  expect_error_naming([] { parse_wsd_decay_style("minus-sqrt"); }, "--lr-wsd-decay-style");
  expect_error_naming([] { parse_wd_incr_style("exponential"); }, "--weight-decay-incr-style");
}

TEST(LrSchedule, BadConfigsNameTheFlag) {
  auto make = [](auto edit) {
    return [edit] {
      LrScheduleConfig c = base_config(LrDecayStyle::linear);
      edit(c);
      OptimizerParamScheduler s(c);
    };
  };
  expect_error_naming(make([](LrScheduleConfig& c) { c.min_lr = 2.0; }), "--min-lr");
  expect_error_naming(make([](LrScheduleConfig& c) { c.min_lr = -1.0; }), "--min-lr");
  expect_error_naming(make([](LrScheduleConfig& c) { c.lr_warmup_init = 1.5; }), "--lr-warmup-init");
  expect_error_naming(make([](LrScheduleConfig& c) { c.lr_decay_steps = 0; c.lr_warmup_steps = 0; }),
                      "--lr-decay-iters");
  expect_error_naming(make([](LrScheduleConfig& c) { c.lr_warmup_steps = 1100; }), "--lr-warmup-iters");
  expect_error_naming(make([](LrScheduleConfig& c) { c.lr_decay_style = LrDecayStyle::wsd; }),
                      "--lr-wsd-decay-iters");
  expect_error_naming(make([](LrScheduleConfig& c) {
                        c.lr_decay_style = LrDecayStyle::wsd;
                        c.wsd_decay_steps = 1101;
                      }),
                      "--lr-wsd-decay-iters");
  expect_error_naming(make([](LrScheduleConfig& c) { c.start_wd = -0.1; c.end_wd = 0.1; }),
                      "--start-weight-decay");
  expect_error_naming(make([](LrScheduleConfig& c) { c.start_wd = 0.2; c.end_wd = 0.1; c.wd_incr_style = WdIncrStyle::linear; }),
                      "--end-weight-decay");
  expect_error_naming(make([](LrScheduleConfig& c) { c.start_wd = 0.0; c.end_wd = 0.1; }),
                      "--weight-decay-incr-style constant");
  expect_error_naming(make([](LrScheduleConfig& c) {
                        c.start_wd = 0.0;
                        c.end_wd = 0.1;
                        c.wd_incr_style = WdIncrStyle::cosine;
                        c.wd_incr_steps = 0;
                      }),
                      "--weight-decay-incr-style cosine");
}

TEST(LrSchedule, BadFlagsNameTheFlag) {
  auto iters = [] {
    LrScheduleFlags f;
    f.lr = 1e-3;
    f.train_iters = 100;
    f.global_batch_size = 4;
    return f;
  };
  auto expect_flags_error = [](LrScheduleFlags f, const std::string& needle) {
    expect_error_naming([f] { lr_schedule_config_from_flags(f); }, needle);
  };
  LrScheduleFlags f = iters();
  f.lr_warmup_iters = 5;
  f.lr_warmup_fraction = 0.01;
  expect_flags_error(f, "--lr-warmup-fraction and --lr-warmup-iters");

  f = iters();
  f.train_samples = 400;
  expect_flags_error(f, "--train-iters and --train-samples");

  f = iters();
  f.train_iters.reset();
  expect_flags_error(f, "either --train-iters or --train-samples");

  f = iters();
  f.lr_decay_samples = 100;
  expect_flags_error(f, "--lr-decay-samples");
  f = iters();
  f.lr_warmup_samples = 100;
  expect_flags_error(f, "--lr-warmup-samples");
  f = iters();
  f.lr_wsd_decay_samples = 100;
  expect_flags_error(f, "--lr-wsd-decay-samples");
  f = iters();
  f.global_batch_size = 0;
  expect_flags_error(f, "--global-batch-size");
  f = iters();
  f.min_lr = 1.0;
  expect_flags_error(f, "--min-lr");
  f = iters();
  f.lr_warmup_iters = 100;  // == train_iters: warmup not shorter than decay
  expect_flags_error(f, "--lr-warmup-iters");
  f = iters();
  f.lr_decay_style = "WSD";
  expect_flags_error(f, "--lr-wsd-decay-iters");
  f = iters();
  f.lr_decay_style = "WSD";
  f.lr_wsd_decay_iters = 101;
  expect_flags_error(f, "--lr-wsd-decay-iters");
  f = iters();
  f.start_weight_decay = 0.0;
  expect_flags_error(f, "--start-weight-decay");
  f = iters();
  f.weight_decay_incr_style = "linear";
  f.start_weight_decay = 0.0;
  expect_flags_error(f, "--end-weight-decay");

  LrScheduleFlags s;
  s.lr = 1e-3;
  s.train_samples = 1000;
  s.lr_warmup_iters = 3;
  expect_flags_error(s, "--lr-warmup-iters");
  s.lr_warmup_iters = 0;
  s.lr_decay_iters = 3;
  expect_flags_error(s, "--lr-decay-iters");
  s.lr_decay_iters.reset();
  s.lr_warmup_samples = 10;
  s.lr_warmup_fraction = 0.1;
  expect_flags_error(s, "--lr-warmup-fraction and --lr-warmup-samples");
}

}  // namespace
}  // namespace mt
