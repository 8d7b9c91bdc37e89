// Megatron's RoPE flags end to end: --rotary-percent, --rotary-interleaved and the old spelling
// --use-rotary-position-embeddings reach the model from the command line; --rotary-percent 1.0 is
// the model without the flag bit for bit while 0.5 is another model that trains; a checkpoint
// records both settings, resumes exactly with them, gives them to --use-checkpoint-args, and a
// record without them (written before they existed) reads as Megatron's defaults.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "app/options.h"
#include "app/train_flags.h"
#include "ckpt/checkpoint_dir.h"
#include "testing.h"
#include "train/checkpoint_args.h"
#include "train/trainer.h"

namespace mt {
namespace {

// A small Llama-style model (RMSNorm, SwiGLU, RoPE, grouped queries; head dim 16) from train's flags.
ModelConfig llama_from_flags(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
                                   "--group-query-attention", "--num-query-groups", "2", "--seq-length", "32",
                                   "--vocab-size", "128", "--position-embedding-type", "rope", "--normalization",
                                   "RMSNorm", "--swiglu", "--disable-bias-linear", "--hidden-dropout", "0",
                                   "--attention-dropout", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return model_config(parse_options("train", args));
}

TrainConfig mock_run(int64_t iterations, const std::string& save = "") {
  TrainConfig t;
  t.micro_batch_size = 4;
  t.global_batch_size = 8;
  t.train_iters = iterations;
  t.log_interval = 1000;
  t.eval_iters = 0;
  t.seed = 11;
  t.schedule.lr = 3e-3;
  t.schedule.min_lr = 3e-4;
  t.schedule.lr_decay_style = "cosine";
  t.schedule.lr_warmup_iters = 4;
  t.checkpoint.save = save;
  if (!save.empty()) t.checkpoint.save_interval = iterations / 2;
  return t;
}

TrainResult run(const ModelConfig& m, const TrainConfig& t) {
  Trainer trainer(m, t);
  return trainer.run([](const std::string&) {});
}

std::string finalize_error(ModelConfig c) {
  try {
    c.finalize();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PartialRope, FlagsSetTheModel) {
  const ModelConfig defaults = model_config(parse_options("train", {}));
  EXPECT_EQ(defaults.rotary_percent, 1.0);
  EXPECT_FALSE(defaults.rotary_interleaved);
  EXPECT_EQ(defaults.position_embedding_type, PositionEmbedding::learned_absolute);

  ModelConfig c = model_config(parse_options(
      "train", {"--use-rotary-position-embeddings", "--rotary-percent", "0.5", "--rotary-interleaved", "--vocab-size", "100"}));
  EXPECT_EQ(c.position_embedding_type, PositionEmbedding::rope);
  EXPECT_EQ(c.rotary_percent, 0.5);
  EXPECT_TRUE(c.rotary_interleaved);
  c.finalize();  // hidden 128 over 4 heads: head dim 32, of which 16 rotated, as 8 pairs
  EXPECT_EQ(c.rotary_dim(), 16);
  EXPECT_EQ(c.rope_table_width(), 8);
  EXPECT_EQ(c.rope_form(), RopeForm::interleaved);
  EXPECT_NE(c.summary().find("RoPE on 16 of 32 head dims (--rotary-percent 0.5) interleaved"), std::string::npos)
      << c.summary();
  // Megatron's validate_args: the old spelling means rope whatever --position-embedding-type says.
  EXPECT_EQ(model_config(parse_options("train", {"--position-embedding-type", "learned_absolute",
                                                 "--use-rotary-position-embeddings"}))
                .position_embedding_type,
            PositionEmbedding::rope);
  // Megatron's dim = int(kv_channels · rotary_percent), truncated: 0.3 of 32 is 9 (odd: 5 pairs).
  c.rotary_percent = 0.3;
  EXPECT_EQ(c.rotary_dim(), 9);
  EXPECT_EQ(c.rope_table_width(), 5);
}

TEST(PartialRope, BadValuesAreRefusedByName) {
  ModelConfig c = llama_from_flags({});
  for (const double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    c.rotary_percent = bad;
    EXPECT_NE(finalize_error(c).find("--rotary-percent must be in (0, 1]"), std::string::npos) << bad;
  }
  c.rotary_percent = 0.05;  // int(16 · 0.05) = 0
  EXPECT_NE(finalize_error(c).find("rotates no element"), std::string::npos) << finalize_error(c);
  c.rotary_percent = 1.0;
  c.kv_channels = 15;  // an odd head dim rotated whole has an element without a partner
  EXPECT_NE(finalize_error(c).find("RoPE needs an even head dimension"), std::string::npos) << finalize_error(c);
  c.rotary_percent = 0.5;  // 7 of 15: 4 pairs fit
  EXPECT_EQ(finalize_error(c), "");
}

// --rotary-percent 1.0 gives the model without the flag, bit for bit; 0.5 another one (the flag
// reaches the attention), rotate-half or interleaved, and each trains on the mock data's pattern.
TEST(PartialRope, FullPercentIsTheDefaultAndHalfTrains) {
  const TrainResult plain = run(llama_from_flags({}), mock_run(60));
  const TrainResult full = run(llama_from_flags({"--rotary-percent", "1.0"}), mock_run(60));
  ASSERT_EQ(plain.iterations.size(), 60u);
  ASSERT_EQ(full.iterations.size(), 60u);
  for (size_t i = 0; i < 60; ++i) {
    EXPECT_EQ(full.iterations[i].loss, plain.iterations[i].loss) << "iteration " << i + 1;
    EXPECT_EQ(full.iterations[i].grad_norm, plain.iterations[i].grad_norm) << "iteration " << i + 1;
  }
  const auto mean_last = [](const TrainResult& r) {
    double s = 0.0;
    for (size_t i = r.iterations.size() - 5; i < r.iterations.size(); ++i) s += r.iterations[i].loss / 5.0;
    return s;
  };
  std::vector<double> second_losses;  // plain, rotate-half 0.5, interleaved 0.5
  second_losses.push_back(plain.iterations[1].loss);
  for (const bool interleaved : {false, true}) {
    SCOPED_TRACE(interleaved ? "interleaved" : "rotate-half");
    std::vector<std::string> flags = {"--rotary-percent", "0.5"};
    if (interleaved) flags.push_back("--rotary-interleaved");
    const TrainResult half = run(llama_from_flags(flags), mock_run(60));
    ASSERT_EQ(half.iterations.size(), 60u);
    EXPECT_NEAR(half.iterations[0].loss, std::log(128.0), 0.3);
    for (const double other : second_losses) EXPECT_NE(half.iterations[1].loss, other);  // three different models
    second_losses.push_back(half.iterations[1].loss);
    std::printf("%s: loss %.4f -> %.4f (whole heads: %.4f)\n", interleaved ? "interleaved 0.5" : "rotary 0.5",
                half.iterations[0].loss, mean_last(half), mean_last(plain));
    EXPECT_LT(mean_last(half), 0.5 * half.iterations[0].loss);
  }
}

TEST(PartialRope, CheckpointsRecordAndResumeTheRotarySettings) {
  test::TempDir dir;
  const ModelConfig m = llama_from_flags({"--rotary-percent", "0.5", "--rotary-interleaved"});
  Trainer whole(m, mock_run(10, dir.path()));
  const TrainResult want = whole.run([](const std::string&) {});
  ASSERT_EQ(read_latest_iteration(dir.path()), 10);

  // --use-checkpoint-args: a command line without the flags gets them from the checkpoint.
  ModelConfig from_ckpt = llama_from_flags({});
  apply_checkpoint_args(dir.path(), 5, from_ckpt);
  EXPECT_EQ(from_ckpt.rotary_percent, 0.5);
  EXPECT_TRUE(from_ckpt.rotary_interleaved);

  // Resumed at 5 with the checkpoint's settings: the uninterrupted run's losses, bit for bit.
  TrainConfig resumed_run = mock_run(10);
  resumed_run.checkpoint.load = dir.path();
  resumed_run.checkpoint.ckpt_step = 5;
  Trainer resumed(from_ckpt, resumed_run);
  ASSERT_EQ(resumed.load_checkpoint(dir.path()), 5);
  const TrainResult got = resumed.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(got.iterations[i].loss, want.iterations[i + 5].loss) << "iteration " << i + 6;
  for (const Param& p : resumed.model().params().params()) {
    const Param& q = whole.model().params().get(p.name);
    EXPECT_EQ(std::memcmp(p.value.data, q.value.data, p.value.bytes()), 0) << p.name;
  }

  // A record from before the flags existed: whole heads, rotate-half, whatever the config held.
  nlohmann::json old = model_record(from_ckpt);
  ASSERT_TRUE(old.contains("rotary_percent"));
  ASSERT_TRUE(old.contains("rotary_interleaved"));
  old.erase("rotary_percent");
  old.erase("rotary_interleaved");
  ModelConfig legacy = from_ckpt;
  apply_model_record(old, "old manifest.json", legacy);
  EXPECT_EQ(legacy.rotary_percent, 1.0);
  EXPECT_FALSE(legacy.rotary_interleaved);
}

}  // namespace
}  // namespace mt
