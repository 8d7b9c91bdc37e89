// End to end: `megatron train`'s trainer on Megatron's mock data (sequences 1, 2, ..., L-1 then
// EOD) learns the counting pattern: the training loss falls from about log(V) at the start to a
// small fraction of it, and so do the validation and test losses measured without dropout.
#include <cmath>

#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

TEST(TrainMockData, LossFallsFarBelowLogVocab) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 128;
  m.hidden_dropout = 0.0f;
  m.attention_dropout = 0.0f;
  TrainConfig t;
  t.micro_batch_size = 4;
  t.global_batch_size = 8;
  t.train_iters = 150;
  t.log_interval = 20;
  t.eval_interval = 75;
  t.eval_iters = 4;
  t.schedule.lr = 3e-3;
  t.schedule.min_lr = 3e-4;
  t.schedule.lr_decay_style = "cosine";
  t.schedule.lr_warmup_iters = 6;
  Trainer trainer(m, t);
  const TrainResult r = trainer.run([](const std::string&) {});
  const double log_v = std::log(128.0);
  ASSERT_EQ(r.iterations.size(), 150u);
  EXPECT_NEAR(r.iterations.front().loss, log_v, 0.3);
  double last = 0.0;
  for (size_t i = 140; i < 150; ++i) last += r.iterations[i].loss / 10.0;
  EXPECT_LT(last, 0.1 * log_v);
  ASSERT_EQ(r.evaluations.size(), 4u);  // valid at 75 and 150, then valid and test after training
  EXPECT_LT(r.evaluations[0].loss, 0.5 * log_v);
  for (size_t i = 1; i < 4; ++i) EXPECT_LT(r.evaluations[i].loss, 0.1 * log_v) << "evaluation " << i;
}

}  // namespace
}  // namespace mt
