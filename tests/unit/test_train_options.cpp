// `megatron train` at the option level: the accepted flag set is frozen here, every bad or
// inconsistent combination fails with one clear message, and a good command line trains and
// prints Megatron's output (cmd_train driven in-process, as main() calls it).
#include <algorithm>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/options.h"
#include "base/error.h"
#include "testing.h"

namespace mt {
namespace {

TEST(TrainOptions, AcceptedFlagSetIsFrozen) {
  // Changing the option table must change this list: flags are part of the user interface.
  const std::vector<std::string> expected = {
      "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
      "--accumulate-allreduce-grads-in-fp32", "--adam-beta1", "--adam-beta2", "--adam-eps", "--apply-layernorm-1p",
      "--apply-wd-to-qk-layernorm",
      "--attention-backend", "--attention-dropout", "--bf16", "--calculate-per-token-loss", "--check-weight-hash-across-dp-replicas-interval", "--ckpt-step",
      "--clip-grad", "--config", "--context-parallel-size", "--cp-comm-type", "--data-cache-path", "--data-path", "--ddp-average-in-collective",
      "--ddp-bucket-size", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--decoupled-lr", "--decoupled-min-lr",
      "--device", "--disable-bias-linear", "--end-weight-decay", "--eod-mask-loss", "--eval-global-batch-size", "--eval-interval", "--eval-iters",
      "--exit-duration-in-mins", "--exit-interval", "--exit-on-missing-checkpoint", "--exit-signal", "--exit-signal-handler", "--expert-model-parallel-size",
      "--expert-tensor-parallel-size", "--ffn-hidden-size", "--fine-grained-activation-offloading", "--finetune", "--fp16", "--global-batch-size",
      "--group-query-attention", "--hidden-dropout", "--hidden-size", "--hysteresis", "--init-method-std",
      "--initial-loss-scale", "--kv-channels", "--load", "--log-interval", "--log-memory", "--log-params-norm", "--log-progress", "--loss-scale",
      "--loss-scale-window", "--lr", "--lr-decay-iters", "--lr-decay-samples", "--lr-decay-style",
      "--lr-warmup-fraction", "--lr-warmup-init", "--lr-warmup-iters", "--lr-warmup-samples",
      "--lr-wsd-decay-iters", "--lr-wsd-decay-samples", "--lr-wsd-decay-style",
      "--make-vocab-size-divisible-by", "--max-position-embeddings", "--merge-file", "--micro-batch-size",
      "--microbatch-group-size-per-virtual-pipeline-stage", "--min-loss-scale", "--min-lr", "--mock-data",
      "--moe-aux-loss-coeff", "--moe-expert-capacity-factor", "--moe-ffn-hidden-size", "--moe-grouped-gemm",
      "--moe-layer-freq", "--moe-layer-recompute", "--moe-pad-expert-input-to-capacity", "--moe-router-bias-update-rate",
      "--moe-router-dtype", "--moe-router-enable-expert-bias", "--moe-router-group-topk",
      "--moe-router-load-balancing-type", "--moe-router-num-groups", "--moe-router-pre-softmax",
      "--moe-router-score-function", "--moe-router-topk", "--moe-router-topk-scaling-factor",
      "--moe-shared-expert-intermediate-size", "--moe-shared-expert-overlap", "--moe-token-dispatcher-type",
      "--moe-token-drop-policy", "--moe-z-loss-coeff",
      "--muon-coefficient-type", "--muon-extra-scale-factor", "--muon-fp32-matmul-prec", "--muon-momentum",
      "--muon-nesterov", "--muon-no-split-qkv", "--muon-num-ns-steps", "--muon-scalar-optimizer", "--muon-scale-mode",
      "--muon-tp-mode",
      "--no-load-optim", "--no-load-rng", "--no-position-embedding", "--no-save-optim",
      "--no-save-rng", "--norm-epsilon", "--normalization", "--null-tokenizer-eod-id", "--num-attention-heads",
      "--num-distributed-optimizer-instances", "--num-experts", "--num-layers",
      "--num-layers-per-virtual-pipeline-stage", "--num-query-groups",
      "--num-virtual-stages-per-pipeline-rank", "--offload-modules", "--openai-gelu", "--optimizer", "--overlap-grad-reduce",
      "--overlap-param-gather", "--override-opt-param-scheduler", "--override-opt_param-scheduler",
      "--pipeline-model-parallel-layout", "--pipeline-model-parallel-size", "--position-embedding-type", "--print-config", "--profile-ops",
      "--qk-layernorm", "--recompute-activations", "--recompute-granularity", "--recompute-method", "--recompute-modules",
      "--recompute-num-layers", "--reset-attention-mask", "--reset-position-ids", "--rotary-base",
      "--rotary-interleaved", "--rotary-percent", "--save",
      "--save-interval", "--save-retain-interval", "--seed", "--seq-length", "--sequence-parallel", "--split",
      "--squared-relu", "--start-weight-decay", "--step-batch-size-schedule", "--swiglu",
      "--tensor-model-parallel-size", "--test-data-path", "--tiktoken-num-special-tokens", "--tiktoken-pattern",
      "--tokenizer-model", "--tokenizer-special-tokens", "--tokenizer-type",
      "--train-data-path", "--train-iters", "--train-samples", "--untie-embeddings-and-output-weights",
      "--use-checkpoint-args", "--use-checkpoint-opt-param-scheduler", "--use-checkpoint-opt_param-scheduler",
      "--use-distributed-optimizer", "--use-rotary-position-embeddings", "--use-tp-pp-dp-mapping", "--valid-data-path",
      "--vocab-extra-ids", "--vocab-file", "--vocab-size", "--weight-decay", "--weight-decay-incr-style",
  };

  std::vector<std::string> actual;
  for (const OptionSpec& o : option_table()) {
    const std::string commands = std::string(",") + o.commands + ",";
    if (commands.find(",train,") != std::string::npos) actual.push_back(o.name);
  }
  std::sort(actual.begin(), actual.end());
  EXPECT_TRUE(std::adjacent_find(actual.begin(), actual.end()) == actual.end()) << "a flag is listed twice";
  EXPECT_EQ(actual, expected);
}

TEST(TrainOptions, DefaultsAreMegatrons) {
  const Options o = parse_options("train", {});
  EXPECT_EQ(o.integer("--log-interval"), 100);
  EXPECT_EQ(o.integer("--eval-iters"), 100);
  EXPECT_EQ(o.integer("--seed"), 1234);
  EXPECT_DOUBLE_EQ(o.real("--min-lr"), 0.0);
  EXPECT_EQ(o.text("--lr-decay-style"), "linear");
  EXPECT_EQ(o.text("--lr-wsd-decay-style"), "exponential");
  EXPECT_EQ(o.text("--weight-decay-incr-style"), "constant");
  EXPECT_EQ(o.integer("--lr-warmup-iters"), 0);
  EXPECT_DOUBLE_EQ(o.real("--weight-decay"), 0.01);
  EXPECT_DOUBLE_EQ(o.real("--clip-grad"), 1.0);
  for (const char* unset : {"--micro-batch-size", "--global-batch-size", "--train-iters", "--train-samples", "--lr",
                            "--microbatch-group-size-per-virtual-pipeline-stage", "--eval-interval", "--exit-interval", "--lr-decay-iters", "--lr-warmup-fraction",
                            "--start-weight-decay", "--tokenizer-type", "--split"})
    EXPECT_FALSE(o.has(unset)) << unset;
  EXPECT_FALSE(o.flag("--calculate-per-token-loss"));
  EXPECT_FALSE(o.flag("--mock-data"));
}

// A small, valid command line; each case below breaks one thing.
std::vector<std::string> good_args() {
  return {"--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
          "--vocab-size", "64", "--mock-data", "--micro-batch-size", "2", "--global-batch-size", "4",
          "--train-iters", "2", "--lr", "1e-3", "--eval-iters", "1", "--log-interval", "1"};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::vector<std::string> without(std::vector<std::string> args, const std::string& flag, bool has_value = true) {
  auto it = std::find(args.begin(), args.end(), flag);
  if (it != args.end()) args.erase(it, it + (has_value ? 2 : 1));
  return args;
}

std::string train_error(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  std::string message;
  try {
    cmd_train(args);
  } catch (const Error& e) {
    message = e.what();
  }
  ::testing::internal::GetCapturedStdout();
  return message;
}

TEST(TrainOptions, BadCombinationsFailWithOneClearMessage) {
  const std::vector<std::string> base = good_args();
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Case> cases = {
      {with(without(base, "--global-batch-size"), {"--global-batch-size", "5"}),
       "--global-batch-size (5) is not a multiple of --micro-batch-size (2) x data-parallel size (1)"},
      {with(base, {"--train-samples", "8"}), "--train-iters and --train-samples are mutually exclusive"},
      {with(base, {"--step-batch-size-schedule", "0:2 64:8"}),
       "--global-batch-size 4 differs from the final batch size 8 of --step-batch-size-schedule"},
      {with(without(base, "--global-batch-size"), {"--step-batch-size-schedule", "0:2 64:5"}),
       "the --step-batch-size-schedule batch size (5) is not a multiple of --micro-batch-size (2)"},
      {with(base, {"--step-batch-size-schedule", "16:4"}), "the first threshold must be 0 (got 1 samples"},
      {with(base, {"--eval-global-batch-size", "3"}), "--eval-global-batch-size (3) must be a positive multiple"},
      {without(base, "--train-iters"), "either --train-iters or --train-samples must be given"},
      {with(without(base, "--train-iters"), {"--train-samples", "3"}), "less than one global batch"},
      {with(base, {"--lr-warmup-iters", "1", "--lr-warmup-fraction", "0.1"}),
       "--lr-warmup-fraction and --lr-warmup-iters are mutually exclusive"},
      {with(base, {"--lr-decay-samples", "8"}), "--lr-decay-samples needs sample-based training"},
      {with(with(without(base, "--train-iters"), {"--train-samples", "8"}), {"--lr-warmup-iters", "1"}),
       "--lr-warmup-iters needs iteration-based training"},
      {with(base, {"--min-lr", "1e-2"}), "--min-lr (0.01) must be <= --lr"},
      {with(base, {"--lr-warmup-iters", "2"}), "must be shorter than LR decay"},
      {with(base, {"--lr-decay-style", "WSD"}), "--lr-wsd-decay-iters"},
      {with(base, {"--start-weight-decay", "0.1"}), "need --weight-decay-incr-style linear or cosine"},
      {with(base, {"--weight-decay-incr-style", "linear", "--start-weight-decay", "0.1"}),
       "needs both --start-weight-decay and --end-weight-decay"},
      {with(base, {"--lr-decay-style", "exp"}), "--lr-decay-style must be one of"},
      {with(base, {"--squared-relu", "--swiglu"}), "--swiglu, --openai-gelu and --squared-relu exclude each other"},
      {with(base, {"--eval-interval", "0"}), "--eval-interval must be > 0"},
      {with(base, {"--exit-interval", "-1"}), "--exit-interval must be > 0"},
      {with(without(base, "--log-interval"), {"--log-interval", "0"}), "--log-interval must be > 0"},
      {without(base, "--micro-batch-size"), "pass --micro-batch-size"},
      {without(base, "--lr"), "pass --lr"},
      {without(base, "--mock-data", false), "no training data: pass --data-path PREFIX"},
      {without(base, "--vocab-size"), "needs --vocab-size"},
      {with(base, {"--tokenizer-type", "GPT2BPETokenizer"}), "--mock-data reads NullTokenizer ids"},
      {with(base, {"--data-path", "corpus"}), "--mock-data excludes --data-path"},
      {with(without(base, "--mock-data", false), {"--data-path", "0.5", "a", "0.5"}), "looks like a weight"},
      {with(without(base, "--mock-data", false), {"--data-path", "/nonexistent/corpus"}), "does not exist"},
      {with(base, {"--tokenizer-type", "Gpt2"}), "--tokenizer-type must be one of"},
      {with(base, {"--split", "1,2,3,4"}), "--split"},
      {with(base, {"--train-iter", "3"}), "did you mean --train-iters?"},
      {with(without(base, "--eval-iters"), {"--eval-iters", "x"}), "expects an integer"},
      {with(base, {"--ddp-bucket-size", "1000"}), "--ddp-bucket-size applies only with --overlap-grad-reduce"},
      {with(base, {"--overlap-grad-reduce", "--ddp-bucket-size", "-5"}), "--ddp-bucket-size must be positive"},
      {with(base, {"--overlap-grad-reduce", "--overlap-param-gather"}), "supported with the distributed optimizer"},
      {with(base, {"--use-distributed-optimizer", "--overlap-param-gather"}), "needs --overlap-grad-reduce"},
      {with(base, {"--ddp-average-in-collective", "--calculate-per-token-loss"}), "cannot be combined with --calculate-per-token-loss"},
      {with(base, {"--num-distributed-optimizer-instances", "2"}), "needs the distributed optimizer; add --use-distributed-optimizer"},
      {with(base, {"--use-distributed-optimizer", "--num-distributed-optimizer-instances", "2"}),
       "--num-distributed-optimizer-instances 2 does not divide the data-parallel size 1"},
  };
  for (const Case& c : cases) {
    const std::string message = train_error(c.args);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "expected \"" << c.message << "\", got \"" << message << "\"";
    // One message: a single line.
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(TrainOptions, AGoodCommandLineTrainsAndPrintsMegatronsOutput) {
  ::testing::internal::CaptureStdout();
  const int rc = cmd_train(with(good_args(), {"--tokenizer-type", "NullTokenizer", "--split", "969,30,1",
                                              "--lr-decay-style", "cosine", "--eval-interval", "1"}));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("note: --split 969,30,1 is ignored: mock data always uses the split 1,1,1"), std::string::npos);
  for (const char* field : {" iteration        1/       2 |", " iteration        2/       2 |", "consumed samples:",
                            "elapsed time per iteration (ms):", "throughput per GPU (TFLOP/s/GPU):",
                            "tokens per second:", "learning rate:", "global batch size:     4 |", "lm loss:",
                            "loss scale: 1.0 |", "grad norm:", "number of skipped iterations:   0 |",
                            "number of nan iterations:   0 |", "[after iteration 1] memory",
                            " validation loss at iteration 1 |", " validation loss at iteration 2 on test set |"})
    EXPECT_NE(out.find(field), std::string::npos) << field << "\n" << out;
  // stdout is not a terminal here: no progress estimate.
  EXPECT_EQ(out.find("[progress]"), std::string::npos);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

std::string error_with(std::vector<std::string> extra) {
  std::vector<std::string> args = good_args();
  args.insert(args.end(), extra.begin(), extra.end());
  return train_error(args);
}

// The --moe-* flags: refused without --num-experts, and each impossible layout named with its numbers.
TEST(TrainOptions, MoeFlagsAreChecked) {
  const auto has = [](const std::string& error, const char* needle) {
    EXPECT_NE(error.find(needle), std::string::npos) << error;
  };
  has(error_with({"--moe-router-topk", "1"}), "--moe-router-topk applies to mixture-of-experts models: pass --num-experts");
  has(error_with({"--expert-model-parallel-size", "2"}), "--expert-model-parallel-size applies to mixture-of-experts");
  const std::vector<std::string> moe = {"--num-experts", "4", "--disable-bias-linear"};
  const auto with_moe = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), moe.begin(), moe.end());
    return error_with(extra);
  };
  has(with_moe({"--moe-token-drop-policy", "position"}), "--moe-token-drop-policy needs --moe-expert-capacity-factor");
  has(with_moe({"--moe-pad-expert-input-to-capacity"}), "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
  has(with_moe({"--expert-model-parallel-size", "3"}), "--expert-model-parallel-size (3)");
  has(with_moe({"--moe-router-topk", "6"}), "--moe-router-topk 6 must lie in [1, --num-experts 4]");
  has(with_moe({"--moe-router-num-groups", "3", "--moe-router-group-topk", "1"}),
      "--moe-router-num-groups 3 does not divide --num-experts 4");
  has(with_moe({"--moe-router-dtype", "fp64"}), "--moe-router-dtype fp64 is not supported");
  has(with_moe({"--moe-layer-freq", "[1,0,1,0,1]"}), "lists 5 layers but --num-layers is");
  has(error_with({"--num-experts", "4"}), "pass --disable-bias-linear");
}

TEST(TrainOptions, PrecisionAndRecomputeFlagsAreChecked) {
  EXPECT_NE(error_with({"--bf16", "--fp16"}).find("exclude each other"), std::string::npos);
  EXPECT_NE(error_with({"--recompute-granularity", "full"}).find("needs --recompute-method"), std::string::npos);
  EXPECT_NE(error_with({"--recompute-method", "block"}).find("--recompute-granularity full only"),
            std::string::npos);
  EXPECT_NE(error_with({"--recompute-activations", "--recompute-granularity", "full", "--recompute-method", "uniform"})
                .find("drop one of them"),
            std::string::npos);
  EXPECT_NE(error_with({"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"})
                .find("exceeds --num-layers"),
            std::string::npos);
  EXPECT_NE(error_with({"--recompute-modules", "mlp"}).find("selective only"), std::string::npos);
  EXPECT_NE(error_with({"--recompute-granularity", "selective", "--recompute-modules", "mlp", "moe", "--num-experts",
                        "4", "--disable-bias-linear", "--moe-router-load-balancing-type", "global_aux_loss"})
                .find("global_aux_loss with --recompute-granularity full or --recompute-modules moe"),
            std::string::npos);
  EXPECT_NE(error_with({"--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj"})
                .find("multi-latent attention (DeepSeek-V3 layers) (planned)"),
            std::string::npos);
  EXPECT_NE(error_with({"--recompute-granularity", "selective", "--recompute-modules", "attn"})
                .find("--recompute-modules attn: the modules are core_attn, layernorm, mlp, moe_act, moe and shared_experts"),
            std::string::npos);
  // Without core_attn, selective recomputation and the unfused attention (which stores the
  // probabilities) go together; with it Megatron recomputes the unfused core, keeping no
  // probabilities: what the flash path does, so the flags run that (InertCombinationsAreAcceptedWithANote).
  const std::vector<std::string> unfused_mlp = {"--attention-backend", "unfused", "--recompute-granularity",
                                                "selective", "--recompute-modules", "mlp"};
  EXPECT_EQ(error_with(unfused_mlp), "");
  EXPECT_EQ(error_with(with(unfused_mlp, {"core_attn"})), "");
}

}  // namespace
}  // namespace mt
