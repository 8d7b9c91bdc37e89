// End to end on .bin/.idx data: JSON lines preprocessed by `megatron preprocess` (NullTokenizer
// ids following a counting pattern), read back through GptDataset/BlendedDataset with the index
// cache, and trained: the loss falls far below the unigram entropy of the training tokens, the
// second build loads every index from the cache, and `megatron train --data-path` runs a weighted
// blend and rejects an odd weight/prefix mix.
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "app/commands.h"
#include "base/error.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mt_test_real_data_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

// Documents of 20..79 tokens counting up from a random start modulo 60 (ids 0..59; EOD = 63).
std::string write_corpus(const std::string& dir, int documents, uint64_t seed) {
  const std::string path = dir + "/corpus_" + std::to_string(seed) + ".jsonl";
  std::ofstream out(path);
  RngStream rng{seed, 1};
  for (int d = 0; d < documents; ++d) {
    const int start = static_cast<int>(rng.uniform(2 * d) * 60) % 60;
    const int length = 20 + static_cast<int>(rng.uniform(2 * d + 1) * 60) % 60;
    out << "{\"text\": \"";
    for (int k = 0; k < length; ++k) out << (k ? " " : "") << (start + k) % 60;
    out << "\"}\n";
  }
  out.close();
  const std::string prefix = dir + "/corpus_" + std::to_string(seed);
  PreprocessOptions p;
  p.input = path;
  p.output_prefix = prefix;
  p.append_eod = true;
  p.workers = 2;
  preprocess_json_lines(p, [] {
    TokenizerOptions t;
    t.type = "NullTokenizer";
    t.vocab_size = 64;
    return make_tokenizer(t);
  });
  return prefix + "_text_document";
}

double unigram_entropy(const IndexedDataset& ds) {
  std::map<int64_t, double> counts;
  double total = 0;
  for (int64_t i = 0; i < ds.num_sequences(); ++i)
    for (int64_t t : ds.sequence(i)) counts[t] += 1, total += 1;
  double h = 0;
  for (const auto& [t, c] : counts) h -= c / total * std::log(c / total);
  return h;
}

TEST(TrainRealData, LossFallsFarBelowUnigramEntropyAndIndicesAreCached) {
  TempDir dir;
  const std::string prefix = write_corpus(dir.path, 400, 7);
  const double entropy = unigram_entropy(IndexedDataset(prefix));
  EXPECT_GT(entropy, 3.5);  // about log(60): no context-free model does better

  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 32;
  m.vocab_size = 64;
  m.hidden_dropout = 0.0f;
  m.attention_dropout = 0.0f;
  TrainConfig t;
  t.micro_batch_size = 4;
  t.global_batch_size = 8;
  t.train_iters = 80;
  t.log_interval = 20;
  t.eval_iters = 2;
  t.schedule.lr = 3e-3;
  t.schedule.min_lr = 3e-4;
  t.schedule.lr_decay_style = "cosine";
  t.schedule.lr_warmup_iters = 5;
  TrainConfig sized = t;
  sized.finalize();
  GptDataConfig c;
  c.blend = Blend{{prefix}, std::nullopt};
  c.split = "90,5,5";
  c.cache_path = dir / "cache";
  c.gpt.sequence_length = m.seq_length;
  c.gpt.eod_token = 63;
  GptDataBuildStats first, second;
  TrainData data = build_gpt_train_data(c, sized.dataset_sizes(), &first);
  EXPECT_EQ(first.indices_built, 3);
  EXPECT_EQ(first.indices_loaded, 0);
  (void)build_gpt_train_data(c, sized.dataset_sizes(), &second);
  EXPECT_EQ(second.indices_built, 0) << "the second build must load the cached indices";
  EXPECT_EQ(second.indices_loaded, 3);
  // A dataset written again under the same prefix (a new .idx time) gets fresh indices.
  GptDataBuildStats third;
  const std::string idx = idx_path_of(prefix);
  std::filesystem::last_write_time(idx, std::filesystem::last_write_time(idx) + std::chrono::seconds(5));
  (void)build_gpt_train_data(c, sized.dataset_sizes(), &third);
  EXPECT_EQ(third.indices_built, 3);

  Trainer trainer(m, t, std::move(data));
  const TrainResult r = trainer.run([](const std::string&) {});
  ASSERT_EQ(r.iterations.size(), 80u);
  double last = 0.0;
  for (size_t i = 70; i < 80; ++i) last += r.iterations[i].loss / 10.0;
  EXPECT_LT(last, 0.3 * entropy) << "unigram entropy " << entropy;
  ASSERT_FALSE(r.evaluations.empty());
  EXPECT_LT(r.evaluations.back().loss, 0.3 * entropy);
}

TEST(TrainRealData, TrainCommandReadsABlendAndRejectsOddDataPaths) {
  TempDir dir;
  const std::string a = write_corpus(dir.path, 120, 1), b = write_corpus(dir.path, 80, 2);
  const std::vector<std::string> common = {
      "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "16",
      "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--micro-batch-size", "2", "--global-batch-size", "4",
      "--train-iters", "3", "--lr", "1e-3", "--eval-iters", "1", "--log-interval", "1", "--split", "8,1,1",
      "--data-cache-path", dir / "cache"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = common;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  testing::internal::CaptureStdout();
  const int rc = cmd_train(with({"--data-path", "0.3", a, "0.7", b}));
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("iteration        3/       3"), std::string::npos) << out;
  EXPECT_THROW(cmd_train(with({"--data-path", "0.3", a, "0.7"})), Error);
  EXPECT_THROW(cmd_train(with({"--data-path", a, "0.7", b})), Error);
  EXPECT_THROW(cmd_train(with({"--data-path", dir / "missing"})), Error);
  EXPECT_THROW(cmd_train(with({"--data-path", a, "--mock-data"})), Error);
  // Packed documents: position ids and attention restart after each EOD of the real data.
  testing::internal::CaptureStdout();
  EXPECT_EQ(cmd_train(with({"--data-path", a, "--reset-position-ids", "--reset-attention-mask"})), 0);
  testing::internal::GetCapturedStdout();
  EXPECT_THROW(cmd_train(with({"--data-path", a, "--train-data-path", b})), Error);
  // Per-split paths.
  testing::internal::CaptureStdout();
  EXPECT_EQ(cmd_train(with({"--train-data-path", a, "--valid-data-path", b, "--test-data-path", "1", a, "1", b})), 0);
  testing::internal::GetCapturedStdout();
}

// Megatron's real-data scripts pass --split 99,1,0: the empty test split is skipped, as
// Megatron skips it, instead of stopping the run; validation still runs.
TEST(TrainRealData, EmptySplitIsSkipped) {
  TempDir dir;
  const std::string a = write_corpus(dir.path, 120, 1);
  testing::internal::CaptureStdout();
  const int rc = cmd_train({"--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length",
                            "16", "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--micro-batch-size",
                            "2", "--train-iters", "2", "--lr", "1e-3", "--eval-iters", "1", "--eval-interval", "1",
                            "--split", "99,1,0", "--data-path", a, "--data-cache-path", dir / "cache"});
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("validation loss at iteration 1 |"), std::string::npos) << out;
  EXPECT_NE(out.find("on validation set"), std::string::npos) << out;
  EXPECT_EQ(out.find("on test set"), std::string::npos) << out;
}

}  // namespace
}  // namespace mt
