// Megatron's training output: the log line field by field, the interval bookkeeping behind it,
// the validation block, print_datetime's line and the terminal-only progress estimate; and the
// loop printing a line after iteration 1 and every --log-interval iterations.
#include <string>

#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

TEST(TrainLog, LineHasEveryFieldInMegatronsFormat) {
  LogLine l;
  l.iteration = 3;
  l.train_iters = 10;
  l.consumed_samples = 24;
  l.elapsed_ms_per_iteration = 12.34;
  l.tflops_per_gpu = 0.1234;
  l.tokens_per_second = 1234.4;
  l.learning_rate = 1e-3f;
  l.global_batch_size = 8;
  l.lm_loss = 2.5;
  l.loss_scale = 1.0f;
  l.grad_norm = 0.5;
  l.skipped_iterations = 1;
  l.nan_iterations = 2;
  const std::string line = format_log_line(l, "2026-01-02 03:04:05.000006");
  EXPECT_EQ(line,
            " [2026-01-02 03:04:05.000006] iteration        3/      10 | consumed samples:           24 | "
            "elapsed time per iteration (ms): 12.3 | throughput per GPU (TFLOP/s/GPU): 0.123 | "
            "tokens per second: 1234 | learning rate: 1.000000E-03 | global batch size:     8 | "
            "lm loss: 2.500000E+00 | loss scale: 1.0 | grad norm: 0.500 | number of skipped iterations:   1 | "
            "number of nan iterations:   2 |");
  // Megatron leaves out the loss when no iteration of the interval advanced.
  l.lm_loss.reset();
  l.grad_norm.reset();
  const std::string bare = format_log_line(l, "t");
  EXPECT_EQ(bare.find("lm loss"), std::string::npos);
  EXPECT_EQ(bare.find("grad norm"), std::string::npos);
  // --log-params-norm: after the grad norm, as Megatron writes it.
  l.grad_norm = 0.5;
  l.params_norm = 123.4567;
  EXPECT_NE(format_log_line(l, "t").find("| grad norm: 0.500 | params norm: 123.457 | number of skipped"),
            std::string::npos);
}

TEST(TrainLog, IntervalCountsAdvancedSkippedAndNanIterations) {
  IntervalAccumulator acc;
  EXPECT_FALSE(acc.mean_loss().has_value());
  IterationStats s;
  s.loss = 2.0;
  acc.add(s);
  s.loss = 4.0;
  acc.add(s);
  s.skipped = true;
  s.loss = 100.0;  // a skipped iteration's loss is not averaged
  acc.add(s);
  s.loss = std::nan("");
  acc.add(s);
  EXPECT_EQ(acc.iterations(), 4);
  EXPECT_EQ(acc.skipped(), 2);
  EXPECT_EQ(acc.nan(), 1);
  EXPECT_DOUBLE_EQ(*acc.mean_loss(), 3.0);
  acc.reset();
  EXPECT_EQ(acc.iterations(), 0);
}

TEST(TrainLog, ValidationBlockAndDatetimeLine) {
  const std::string block = format_validation_block("iteration 20", 2.0);
  const std::string line = " validation loss at iteration 20 | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | ";
  const std::string rule(line.size() + 1, '-');
  EXPECT_EQ(block, rule + "\n" + line + "\n" + rule);
  // PPL is capped at exp(20).
  EXPECT_NE(format_validation_block("x", 50.0).find("lm loss PPL: 4.851652E+08 |"), std::string::npos);
  const std::string dt = format_datetime_line("after training is done");
  EXPECT_EQ(dt.rfind("[after training is done] datetime: 20", 0), 0u) << dt;
  EXPECT_EQ(dt.size(), std::string("[after training is done] datetime: 2026-01-02 03:04:05.000006 ").size());
}

TEST(TrainLog, CommunicationLineInDecimalUnits) {
  EXPECT_EQ(format_comm_line(0.0, 65536.0, 284160.0),
            " communication per iteration on this rank (ring-algorithm bytes sent): tp 0 B | pp 65.5 kB | dp 284 kB |");
  EXPECT_EQ(format_comm_line(1.5e9, 0.0, 999.0),
            " communication per iteration on this rank (ring-algorithm bytes sent): tp 1.5 GB | pp 0 B | dp 999 B |");
  EXPECT_EQ(format_comm_line(0.0, 0.0, 1e6, std::nullopt, 2.5e6),
            " communication per iteration on this rank (ring-algorithm bytes sent): tp 0 B | pp 0 B | dp 1 MB | cp 2.5 MB |");
}

TEST(TrainLog, ProgressExtrapolatesTheTimeLeft) {
  EXPECT_EQ(format_progress(30, 120, 75.0), "[progress] iteration 30/120 (25.0%) | elapsed 0:01:15 | remaining ~0:03:45");
}

TEST(TrainLog, LoopPrintsAfterTheFirstIterationAndEveryInterval) {
  ModelConfig m;
  m.num_layers = 1;
  m.hidden_size = 32;
  m.num_attention_heads = 2;
  m.seq_length = 8;
  m.vocab_size = 32;
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = 7;
  t.log_interval = 3;
  t.eval_iters = 0;
  t.schedule.lr = 1e-3;
  Trainer trainer(m, t);
  std::vector<std::string> lines;
  const TrainResult r = trainer.run([&](const std::string& line) {
    if (line.find("] iteration ") != std::string::npos) lines.push_back(line);
  });
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(" iteration        1/       7 | consumed samples:            4 |"), std::string::npos);
  EXPECT_NE(lines[1].find(" iteration        3/       7 | consumed samples:           12 |"), std::string::npos);
  EXPECT_NE(lines[2].find(" iteration        6/       7 | consumed samples:           24 |"), std::string::npos);
  // The first line does not reset the interval: the line at 3 averages iterations 1..3.
  char want[64];
  std::snprintf(want, sizeof want, "lm loss: %.6E |", (r.iterations[0].loss + r.iterations[1].loss + r.iterations[2].loss) / 3);
  EXPECT_NE(lines[1].find(want), std::string::npos) << lines[1];
  std::snprintf(want, sizeof want, "lm loss: %.6E |", (r.iterations[3].loss + r.iterations[4].loss + r.iterations[5].loss) / 3);
  EXPECT_NE(lines[2].find(want), std::string::npos) << lines[2];
  // Megatron logs the learning rate after the scheduler's increment.
  std::snprintf(want, sizeof want, "learning rate: %.6E |", static_cast<double>(trainer.scheduler().lr(6 * 4)));
  EXPECT_NE(lines[2].find(want), std::string::npos) << lines[2];
}

}  // namespace
}  // namespace mt
