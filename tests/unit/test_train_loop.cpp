// The training loop against Megatron's semantics: gradient accumulation, loss normalisation
// (default and --calculate-per-token-loss), the LR/WD the updates use, the sampler order,
// evaluation (intervals, no dropout, the validation split continuing), --exit-interval and
// the fatal NaN check.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig tiny_model(float dropout = 0.0f) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 64;
  c.hidden_dropout = dropout;
  c.attention_dropout = dropout;
  return c;
}

TrainConfig tiny_train(int64_t micro_batch, int64_t global_batch, int64_t iters) {
  TrainConfig t;
  t.micro_batch_size = micro_batch;
  t.global_batch_size = global_batch;
  t.train_iters = iters;
  t.eval_iters = 0;
  t.log_interval = 1;
  t.schedule.lr = 1e-3;
  return t;
}

std::vector<float> flat(Trainer& t, bool grads) {
  std::vector<float> out;
  for (const Param& p : t.model().params().params()) {
    const TensorView v = grads ? p.grad : p.value;
    out.insert(out.end(), v.f32(), v.f32() + v.numel());
  }
  return out;
}

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Wraps a source: records which samples were read and lets a test rewrite their loss masks.
class EditedSource : public SampleSource {
 public:
  using Edit = std::function<void(int64_t index, float* mask, int64_t s)>;
  EditedSource(std::shared_ptr<const SampleSource> inner, Edit edit) : inner_(std::move(inner)), edit_(std::move(edit)) {}
  int64_t size() const override { return inner_->size(); }
  int64_t sequence_length() const override { return inner_->sequence_length(); }
  void read(int64_t index, int32_t* tokens, int32_t* labels, float* mask) const override {
    inner_->read(index, tokens, labels, mask);
    if (edit_) edit_(index, mask, sequence_length());
    reads.push_back(index);
  }
  mutable std::vector<int64_t> reads;

 private:
  std::shared_ptr<const SampleSource> inner_;
  Edit edit_;
};

TrainData mock_data(const ModelConfig& m, TrainConfig t) {
  t.finalize();
  return build_mock_train_data(m.vocab_size, m.seq_length, t.seed, false, t.dataset_sizes());
}

// Gradient of Σ mask·loss of each micro-batch of the first global batch, taken on `model` directly.
std::vector<std::vector<float>> per_micro_batch_grads(Trainer& t, const SampleSource& source, std::vector<double>& tokens) {
  const int64_t b = t.config().micro_batch_size, s = t.model_config().seq_length;
  std::vector<std::vector<float>> out;
  for (int64_t m = 0; m < t.config().num_microbatches_at(0); ++m) {
    MicroBatchBuffer buf;
    std::vector<int64_t> idx(static_cast<size_t>(b));
    for (int64_t j = 0; j < b; ++j) idx[static_cast<size_t>(j)] = m * b + j;
    buf.fill(source, idx);
    t.model().params().zero_grads();
    ForwardOptions fo;
    fo.grad_scale = 1.0f;
    fo.dropout = false;
    t.model().forward(0, buf.view(s), TensorView(), fo);
    t.model().backward(0, TensorView());
    out.push_back(flat(t, true));
    tokens.push_back(buf.num_tokens);
  }
  return out;
}

TEST(TrainLoop, AccumulatingMicroBatchesEqualsOneLargerBatch) {
  // Same samples (0..7 then 8..15), same init: 4 micro-batches of 2 against 1 micro-batch of 8.
  const ModelConfig m = tiny_model();
  TrainConfig small = tiny_train(2, 8, 3), large = tiny_train(8, 8, 3);
  // A larger epsilon makes Adam's first update a smooth function of the gradient (with 1e-8 it is
  // ~lr·sign(g), so rounding-level differences of tiny gradients could flip whole updates).
  small.optimizer.adam_eps = large.optimizer.adam_eps = 1e-3f;
  Trainer a(m, small), b(m, large);
  ASSERT_EQ(a.config().num_microbatches_at(0), 4);
  ASSERT_EQ(b.config().num_microbatches_at(0), 1);
  EXPECT_EQ(flat(a, false), flat(b, false));  // identical init

  const ForwardBackwardResult fa = a.forward_backward(), fb = b.forward_backward();
  EXPECT_EQ(fa.num_tokens, 8.0 * 16);
  EXPECT_NEAR(fa.loss_sum, fb.loss_sum, 1e-4 * fb.loss_sum);
  const std::vector<float> ga = flat(a, true), gb = flat(b, true);
  ASSERT_GT(max_abs(gb), 1e-3);
  EXPECT_LT(max_diff(ga, gb), 1e-5 * max_abs(gb));

  // Whole iterations: losses and updated parameters agree to fp32 rounding.
  Trainer c(m, small), d(m, large);
  for (int i = 0; i < 3; ++i) {
    const IterationStats sc = c.train_step(), sd = d.train_step();
    EXPECT_NEAR(sc.loss, sd.loss, 1e-5 * sd.loss) << "iteration " << i + 1;
    EXPECT_NEAR(sc.grad_norm, sd.grad_norm, 1e-4 * sd.grad_norm);
  }
  const std::vector<float> pc = flat(c, false), pd = flat(d, false), p0 = flat(a, false);
  EXPECT_GT(max_diff(pc, p0), 1e-4);  // the parameters did move
  EXPECT_LT(max_diff(pc, pd), 1e-5);
}

// Dropout (hidden and attention) keyed by the global sample: 8 micro-batches of 1, 4 of 2 and one
// of 8 draw the same masks for the same samples, so the curves agree to reduction-order rounding.
TEST(TrainLoop, DropoutMasksFollowTheSampleNotTheMicroBatch) {
  const ModelConfig m = tiny_model(0.2f);
  std::vector<std::vector<IterationStats>> curves;
  for (int64_t micro : {1, 2, 8}) {
    TrainConfig t = tiny_train(micro, 8, 3);
    t.optimizer.adam_eps = 1e-3f;  // as above: updates a smooth function of the gradient
    Trainer trainer(m, t);
    curves.emplace_back();
    for (int i = 0; i < 3; ++i) curves.back().push_back(trainer.train_step());
  }
  TrainConfig t = tiny_train(8, 8, 3);
  t.optimizer.adam_eps = 1e-3f;
  Trainer without(tiny_model(0.0f), t);
  EXPECT_GT(std::fabs(without.train_step().loss - curves[2][0].loss), 1e-3) << "dropout changes the loss";
  for (size_t c = 0; c < 2; ++c) {
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(curves[c][i].loss, curves[2][i].loss, 1e-5 * curves[2][i].loss) << "curve " << c << " iteration " << i;
      EXPECT_NEAR(curves[c][i].grad_norm, curves[2][i].grad_norm, 1e-4 * curves[2][i].grad_norm);
    }
  }
}

TEST(TrainLoop, DefaultLossIsTheMeanOfMicroBatchMeans) {
  // Micro-batch 0 keeps 4 of its 32 tokens, micro-batch 1 all 32: the two normalisations differ,
  // and each gradient is the exact combination of the per-micro-batch gradients it should be.
  const ModelConfig m = tiny_model();
  const TrainConfig base = tiny_train(2, 4, 1);
  const TrainData data = mock_data(m, base);
  auto source = std::make_shared<EditedSource>(data.train, [](int64_t index, float* mask, int64_t s) {
    if (index < 2)
      for (int64_t i = 2; i < s; ++i) mask[i] = 0.0f;
  });
  for (bool per_token : {false, true}) {
    TrainConfig t = base;
    t.calculate_per_token_loss = per_token;
    Trainer trainer(m, t, {source, nullptr, nullptr});
    const ForwardBackwardResult fb = trainer.forward_backward();
    EXPECT_EQ(fb.num_tokens, 4.0 + 32.0);
    const std::vector<float> got = flat(trainer, true);
    std::vector<double> tokens;
    const auto g = per_micro_batch_grads(trainer, *source, tokens);
    ASSERT_EQ(tokens, (std::vector<double>{4.0, 32.0}));
    std::vector<float> want(got.size());
    for (size_t k = 0; k < got.size(); ++k)
      want[k] = per_token ? static_cast<float>((g[0][k] + g[1][k]) / 36.0)
                          : static_cast<float>(g[0][k] / (4.0 * 2) + g[1][k] / (32.0 * 2));
    EXPECT_LT(max_diff(got, want), 1e-5 * max_abs(want)) << (per_token ? "per-token" : "default");
  }
  // The two gradients really differ here (a token of micro-batch 0 weighs 8x more by default).
  TrainConfig t = base;
  Trainer def(m, t, {source, nullptr, nullptr});
  t.calculate_per_token_loss = true;
  Trainer tok(m, t, {source, nullptr, nullptr});
  def.forward_backward();
  tok.forward_backward();
  const std::vector<float> gd = flat(def, true), gt = flat(tok, true);
  EXPECT_GT(max_diff(gd, gt), 0.1 * max_abs(gd));
}

TEST(TrainLoop, PerTokenAndDefaultLossAgreeWhenMasksAreEven) {
  // Every micro-batch keeps the same number of tokens: both normalisations give one gradient.
  const ModelConfig m = tiny_model();
  const TrainConfig base = tiny_train(2, 6, 2);
  auto source = std::make_shared<EditedSource>(mock_data(m, base).train, [](int64_t, float* mask, int64_t) {
    mask[0] = mask[5] = 0.0f;
  });
  TrainConfig t = base;
  Trainer def(m, t, {source, nullptr, nullptr});
  t.calculate_per_token_loss = true;
  Trainer tok(m, t, {source, nullptr, nullptr});
  for (int i = 0; i < 2; ++i) {
    const IterationStats a = def.train_step(), b = tok.train_step();
    EXPECT_DOUBLE_EQ(a.num_tokens, 6.0 * 14);
    // Σ loss / Σ tokens is reported in both modes.
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * a.loss);
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm);
  }
  EXPECT_LT(max_diff(flat(def, false), flat(tok, false)), 1e-6);
}

// Megatron's cosine schedule with linear warmup, written out by hand.
double expected_lr(double n) {
  const double max_lr = 1e-3, min_lr = 1e-4, warmup = 2 * 4, decay = 6 * 4;
  if (n <= warmup) return max_lr * n / warmup;
  const double r = (n - warmup) / (decay - warmup);
  return min_lr + 0.5 * (std::cos(std::numbers::pi * r) + 1.0) * (max_lr - min_lr);
}

TEST(TrainLoop, UpdatesUseTheScheduleAtTheSamplesConsumedBefore) {
  const ModelConfig m = tiny_model();
  TrainConfig t = tiny_train(2, 4, 6);
  t.schedule.min_lr = 1e-4;
  t.schedule.lr_decay_style = "cosine";
  t.schedule.lr_warmup_iters = 2;
  t.schedule.weight_decay_incr_style = "linear";
  t.schedule.start_weight_decay = 0.0;
  t.schedule.end_weight_decay = 0.1;
  Trainer trainer(m, t);
  const std::vector<float> before = flat(trainer, false);
  for (int64_t i = 1; i <= 6; ++i) {
    const IterationStats st = trainer.train_step();
    const double n_before = static_cast<double>((i - 1) * 4), n_after = static_cast<double>(i * 4);
    EXPECT_FLOAT_EQ(st.lr, static_cast<float>(expected_lr(n_before))) << "iteration " << i;
    EXPECT_FLOAT_EQ(st.logged_lr, static_cast<float>(expected_lr(n_after))) << "iteration " << i;
    EXPECT_FLOAT_EQ(st.weight_decay, static_cast<float>(0.1 * n_before / 24.0)) << "iteration " << i;
    EXPECT_EQ(trainer.scheduler().num_steps(), i * 4);
    EXPECT_EQ(st.consumed_samples, i * 4);
    // The first update runs at lr_warmup_init = 0: the parameters must not move at all.
    if (i == 1) {
      EXPECT_EQ(flat(trainer, false), before);
    }
    if (i == 2) {
      EXPECT_GT(max_diff(flat(trainer, false), before), 0.0);
    }
  }
}

TEST(TrainLoop, MicroBatchesReadMegatronsSampleOrder) {
  const ModelConfig m = tiny_model();
  TrainConfig t = tiny_train(2, 6, 2);
  auto source = std::make_shared<EditedSource>(mock_data(m, t).train, nullptr);
  Trainer trainer(m, t, {source, nullptr, nullptr});
  trainer.train_step();
  trainer.train_step();
  EXPECT_EQ(source->reads, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(TrainLoop, SamplerGivesEachDataParallelRankItsSlice) {
  PretrainingSampler r0(100, 8, 2, 0, 2), r1(100, 8, 2, 1, 2);
  EXPECT_EQ(r0.next(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(r1.next(), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(r0.next(), (std::vector<int64_t>{12, 13}));
  EXPECT_EQ(r1.next(), (std::vector<int64_t>{14, 15}));
  EXPECT_EQ(r1.consumed(), 16);
  PretrainingSampler tail(10, 6, 2, 0, 2);
  EXPECT_EQ(tail.next(), (std::vector<int64_t>{6, 7}));
  EXPECT_THROW(tail.next(), Error);  // 10 is not a full step of 4: dropped, as drop_last does
  EXPECT_THROW(PretrainingSampler(10, 10, 2, 0, 1), Error);
}

// Σ mask·loss / Σ mask of samples [first, first + count) of `source`, without dropout.
double manual_eval(Trainer& t, const SampleSource& source, int64_t first, int64_t count, bool dropout) {
  const int64_t b = t.config().micro_batch_size;
  double loss = 0.0, tokens = 0.0;
  for (int64_t i = first; i < first + count; i += b) {
    MicroBatchBuffer buf;
    std::vector<int64_t> idx;
    for (int64_t j = 0; j < b; ++j) idx.push_back(i + j);
    buf.fill(source, idx);
    ForwardOptions fo;
    fo.dropout = dropout;
    fo.first_sample = 12345;
    const LossSums s = t.model().forward(0, buf.view(t.model_config().seq_length), TensorView(), fo).loss;
    loss += s.loss_sum;
    tokens += s.num_tokens;
  }
  return loss / tokens;
}

TEST(TrainLoop, EvaluatesAtIntervalsAndAfterTrainingWithoutDropout) {
  const ModelConfig m = tiny_model(0.3f);
  TrainConfig t = tiny_train(2, 4, 5);
  t.eval_interval = 2;
  t.eval_iters = 2;
  t.log_interval = 100;
  Trainer trainer(m, t);
  EXPECT_EQ(trainer.config().dataset_sizes(), (std::array<int64_t, 3>{20, (5 / 2 + 1) * 2 * 4, 2 * 4}));
  std::string out;
  const TrainResult r = trainer.run([&](const std::string& line) { out += line + "\n"; });
  ASSERT_EQ(r.evaluations.size(), 4u);
  const std::vector<std::pair<int64_t, Split>> want = {
      {2, Split::valid}, {4, Split::valid}, {5, Split::valid}, {5, Split::test}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r.evaluations[i].iteration, want[i].first);
    EXPECT_EQ(r.evaluations[i].split, want[i].second);
    EXPECT_EQ(r.evaluations[i].after_training, i >= 2);
  }
  EXPECT_NE(out.find(" validation loss at iteration 2 | lm loss value: "), std::string::npos);
  EXPECT_NE(out.find(" validation loss at iteration 4 | lm loss value: "), std::string::npos);
  EXPECT_NE(out.find(" validation loss at iteration 5 on validation set | "), std::string::npos);
  EXPECT_NE(out.find(" validation loss at iteration 5 on test set | "), std::string::npos);
  EXPECT_EQ(out.find("validation loss at iteration 3"), std::string::npos);

  // The final evaluations, recomputed without dropout: test from sample 0, validation after the
  // 2 earlier evaluations' 2 x 2 x 4 samples. With dropout the values would differ.
  const double test = manual_eval(trainer, *trainer.data().test, 0, 8, false);
  EXPECT_NEAR(r.evaluations[3].loss, test, 1e-12 * test);
  EXPECT_GT(std::fabs(manual_eval(trainer, *trainer.data().test, 0, 8, true) - test), 1e-4);
  const double valid = manual_eval(trainer, *trainer.data().valid, 16, 8, false);
  EXPECT_NEAR(r.evaluations[2].loss, valid, 1e-12 * valid);
}

TEST(TrainLoop, ExitIntervalStopsWithoutTheFinalEvaluation) {
  TrainConfig t = tiny_train(2, 2, 10);
  t.exit_interval = 3;
  t.eval_iters = 1;
  Trainer trainer(tiny_model(), t);
  std::string out;
  const TrainResult r = trainer.run([&](const std::string& line) { out += line + "\n"; });
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.iterations.size(), 3u);
  EXPECT_EQ(trainer.iteration(), 3);
  EXPECT_TRUE(r.evaluations.empty());
  EXPECT_NE(out.find("[exiting program at iteration 3] datetime: "), std::string::npos);
  EXPECT_EQ(out.find("after training is done"), std::string::npos);
}

// --exit-duration-in-mins: a limit already passed when the first iteration ends stops the run
// there, as Megatron stops before the scheduler's limit; a far limit changes nothing.
TEST(TrainLoop, ExitDurationStopsAfterTheIterationThatPassesIt) {
  TrainConfig t = tiny_train(2, 2, 4);
  t.exit_duration_in_mins = 1e-9;
  Trainer trainer(tiny_model(), t);
  std::string out;
  const TrainResult r = trainer.run([&](const std::string& line) { out += line + "\n"; });
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.iterations.size(), 1u);
  EXPECT_NE(out.find("[exiting program after "), std::string::npos) << out;
  t.exit_duration_in_mins = 60;
  Trainer patient(tiny_model(), t);
  EXPECT_FALSE(patient.run([](const std::string&) {}).exited);
  t.exit_duration_in_mins = 0;
  EXPECT_THROW(Trainer(tiny_model(), t), Error);
}

// --apply-layernorm-1p starts its norm weights at 0 and scales by 1 + w: the same function as
// the plain model's weights of 1, so the first step's loss and gradients are the plain model's bit
// for bit, and later steps stay within rounding (1 + w and w round differently).
TEST(TrainLoop, ZeroCenteredNormsTrainAsThePlainModel) {
  for (Normalization norm : {Normalization::layernorm, Normalization::rmsnorm}) {
    ModelConfig plain = tiny_model();
    plain.normalization = norm;
    ModelConfig centred = plain;
    centred.layernorm_zero_centered_gamma = true;
    Trainer a(plain, tiny_train(2, 2, 6)), b(centred, tiny_train(2, 2, 6));
    EXPECT_EQ(b.model().params().get("decoder.final_layernorm.weight").value.f32()[0], 0.0f);
    const IterationStats first_a = a.train_step(), first_b = b.train_step();
    EXPECT_EQ(first_a.loss, first_b.loss);
    EXPECT_EQ(flat(a, true), flat(b, true));
    const TrainResult ra = a.run([](const std::string&) {}), rb = b.run([](const std::string&) {});
    for (size_t i = 0; i < ra.iterations.size(); ++i)
      EXPECT_NEAR(ra.iterations[i].loss, rb.iterations[i].loss, 1e-5 * ra.iterations[i].loss);
  }
}

// --qk-layernorm's norms are 1-D, so they do not decay, unless --apply-wd-to-qk-layernorm: then
// one step moves their weights (1 at init) by exactly the decay more, and nothing else changes.
TEST(TrainLoop, ApplyWdToQkLayernormDecaysOnlyTheQueryAndKeyNorms) {
  ModelConfig m = tiny_model();
  m.qk_layernorm = true;
  TrainConfig plain = tiny_train(2, 2, 1);
  plain.schedule.weight_decay = 0.5;
  TrainConfig decayed = plain;
  decayed.optimizer.apply_wd_to_qk_layernorm = true;
  Trainer a(m, plain), b(m, decayed);
  const IterationStats step = a.train_step();
  b.train_step();
  ASSERT_GT(step.lr * step.weight_decay, 1e-4);  // a decay step large enough to see
  int qk_norm_weights = 0;
  for (const Param& p : a.model().params().params()) {
    const TensorView other = b.model().params().get(p.name).value;
    const bool decays = is_qk_layernorm(p) && p.name.find(".weight") != std::string::npos;
    qk_norm_weights += decays;
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      if (decays)
        EXPECT_NEAR(other.f32()[i] - p.value.f32()[i], -step.lr * step.weight_decay, 1e-7) << p.name;
      else
        EXPECT_EQ(other.f32()[i], p.value.f32()[i]) << p.name;  // LayerNorm's biases are 0: nothing to decay
    }
  }
  EXPECT_EQ(qk_norm_weights, 2 * m.num_layers);
}

// --log-params-norm: the L2 norm of every parameter after the update, each counted once (the tied
// output layer is the embedding); not computed without the flag.
TEST(TrainLoop, ParamsNormIsTheNormOfTheUpdatedParameters) {
  TrainConfig t = tiny_train(2, 2, 2);
  t.log_params_norm = true;
  Trainer trainer(tiny_model(), t);
  const IterationStats step = trainer.train_step();
  double sum = 0.0;
  for (const float x : flat(trainer, false)) sum += static_cast<double>(x) * x;
  ASSERT_TRUE(step.params_norm.has_value());
  EXPECT_NEAR(*step.params_norm, std::sqrt(sum), 1e-9 * std::sqrt(sum));
  Trainer quiet(tiny_model(), tiny_train(2, 2, 2));
  EXPECT_FALSE(quiet.train_step().params_norm.has_value());
}

// --position-embedding-type none: no position table and no RoPE, so the first step is the learned-
// position model's whose table is zero, bit for bit, with that table's elements fewer.
TEST(TrainLoop, NoPositionEmbeddingIsTheModelWithAZeroTable) {
  const ModelConfig learned = tiny_model();
  ModelConfig none = learned;
  none.position_embedding_type = PositionEmbedding::none;
  Trainer a(learned, tiny_train(2, 2, 4)), b(none, tiny_train(2, 2, 4));
  const TensorView table = a.model().params().get("embedding.position_embeddings.weight").value;
  std::fill(table.f32(), table.f32() + table.numel(), 0.0f);
  EXPECT_EQ(a.model().params().numel() - b.model().params().numel(), table.numel());
  EXPECT_EQ(a.train_step().loss, b.train_step().loss);
  EXPECT_NE(b.model().config().summary().find("no position embedding"), std::string::npos);
}

// --decoupled-lr: the word embedding (tied: also the output layer) steps at its own rate on the
// same schedule; every other parameter at --lr. After one step each is bit for bit what a run at
// that rate alone gives (the first step's gradients do not depend on the rates).
TEST(TrainLoop, DecoupledLrMovesTheEmbeddingAtItsOwnRate) {
  const ModelConfig m = tiny_model();
  TrainConfig decoupled = tiny_train(2, 2, 4), at_lr = decoupled, at_decoupled = decoupled;
  decoupled.decoupled_lr = 5e-3;
  at_decoupled.schedule.lr = 5e-3;
  Trainer a(m, decoupled), b(m, at_lr), c(m, at_decoupled);
  a.train_step();
  b.train_step();
  c.train_step();
  int embeddings = 0;
  for (const Param& p : a.model().params().params()) {
    Trainer& same = is_embedding_or_output(p) ? c : b;
    embeddings += is_embedding_or_output(p);
    const Param& q = same.model().params().get(p.name);
    EXPECT_EQ(std::memcmp(p.value.data, q.value.data, p.value.bytes()), 0) << p.name;
  }
  EXPECT_EQ(embeddings, 1);
  decoupled.decoupled_lr.reset();
  decoupled.decoupled_min_lr = 1e-4;
  EXPECT_THROW(Trainer(m, decoupled), Error);
}

TEST(TrainLoop, SampleBasedRunDropsThePartialLastBatch) {
  TrainConfig t = tiny_train(2, 4, 0);
  t.train_iters.reset();
  t.train_samples = 18;
  t.schedule.lr_warmup_fraction = 0.25;
  Trainer trainer(tiny_model(), t);
  EXPECT_EQ(trainer.config().iterations, 4);
  EXPECT_EQ(trainer.config().dataset_sizes()[0], 18);
  // Sample-based schedules use the sample counts as they are: warmup = 0.25 x 18 samples.
  EXPECT_DOUBLE_EQ(trainer.scheduler().config().lr_warmup_steps, 4.5);
  std::string out;
  const TrainResult r = trainer.run([&](const std::string& line) { out += line + "\n"; });
  EXPECT_EQ(r.iterations.size(), 4u);
  EXPECT_NE(out.find("setting training iterations to 4"), std::string::npos);
  EXPECT_NE(out.find(" iteration        4/       4 |"), std::string::npos);
}

TEST(TrainLoop, NanLossIsFatalWithAClearMessage) {
  const ModelConfig m = tiny_model();
  const TrainConfig t = tiny_train(2, 2, 3);
  auto source = std::make_shared<EditedSource>(mock_data(m, t).train, [](int64_t index, float* mask, int64_t) {
    if (index == 2) mask[3] = std::nanf("");
  });
  Trainer trainer(m, t, {source, nullptr, nullptr});
  trainer.train_step();
  try {
    trainer.train_step();
    FAIL() << "a NaN loss must stop training";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("found NaN in local forward loss calculation at iteration 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(TrainLoop, RejectsDataThatDoesNotFitTheRunAndSkipsMissingSplits) {
  const ModelConfig m = tiny_model();
  TrainConfig t = tiny_train(2, 2, 3);
  TrainData data = mock_data(m, t);
  t.eval_iters = 1;
  {
    // No valid or test data: evaluation is skipped, as Megatron skips an empty split.
    Trainer no_splits(m, t, data);
    EXPECT_TRUE(no_splits.run([](const std::string&) {}).evaluations.empty());
  }
  ModelConfig longer = m;
  longer.seq_length = 32;
  t.eval_iters = 0;
  EXPECT_THROW(Trainer(longer, t, data).iteration(), Error);  // samples of the wrong length
}

}  // namespace
}  // namespace mt
