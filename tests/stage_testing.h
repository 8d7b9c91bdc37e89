// Shared by the stage tests (tests/e2e/test_stages.cpp, tests/parallel/test_tp_stages.cpp):
// micro-batches with documents, gradients by name and their bit-for-bit comparison, a schedule
// runner over a Stage's slots, and the cut-versus-uncut check.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/stage.h"
#include "ops/elementwise.h"
#include "testing.h"

namespace mt::test {

constexpr int64_t kBatch = 2;

// One micro-batch with a loss mask and documents (position ids restart, attention stays inside).
struct Batch {
  HostTensor tokens, labels, mask, positions, doc_start;
  Batch(const ModelConfig& c, uint64_t seed)
      : tokens(randint({kBatch, c.seq_length}, static_cast<int32_t>(c.vocab_size), seed)),
        labels(randint({kBatch, c.seq_length}, static_cast<int32_t>(c.vocab_size), seed + 100)),
        mask(randn({kBatch, c.seq_length}, seed + 200)),
        positions(DType::i32, {kBatch, c.seq_length}),
        doc_start(DType::i32, {kBatch, c.seq_length}) {
    HostTensor breaks = randint({kBatch, c.seq_length}, 4, seed + 300);
    for (int64_t j = 0; j < kBatch; ++j) {
      int32_t start = 0;
      for (int64_t i = 0; i < c.seq_length; ++i) {
        const int64_t at = j * c.seq_length + i;
        if (i > 0 && breaks.i32()[at] == 0) start = static_cast<int32_t>(i);
        doc_start.i32()[at] = start;
        positions.i32()[at] = static_cast<int32_t>(i) - start;
        mask.f32()[at] = mask.f32()[at] > -0.8f ? 1.0f : 0.0f;
      }
    }
  }
  MicroBatch view() {
    return {tokens.view(), labels.view(), mask.view(), positions.view(), doc_start.view()};
  }
};

inline ForwardOptions training(uint64_t round) {
  ForwardOptions o;
  o.first_sample = round;
  o.grad_scale = 0.5f;
  return o;
}

inline void init(ParamStore& params) {
  params.init(7);
  params.zero_grads();
}

using Grads = std::map<std::string, std::vector<float>>;

inline Grads grads_of(ParamStore& params) {
  Grads g;
  for (const Param& p : params.params()) g[p.name].assign(p.grad.f32(), p.grad.f32() + p.grad.numel());
  return g;
}

inline void expect_identical(const Grads& actual, const Grads& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto& [name, want] : expected) {
    const auto it = actual.find(name);
    ASSERT_NE(it, actual.end()) << what << ": no gradient for " << name;
    ASSERT_EQ(it->second.size(), want.size()) << what << ": " << name;
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += it->second[i] != want[i];
    EXPECT_EQ(differ, 0u) << what << ": " << name << " differs in " << differ << " of " << want.size() << " entries";
  }
}

// ---- Several micro-batches in flight on one Stage ----

// A schedule step: the forward or backward of micro-batch mb, in slot mb % slots.
struct Step {
  bool forward;
  int mb;
};

// Runs the schedule and returns each micro-batch's gradient and loss. Float addition does not
// commute bit for bit, so the gradients of interleaved micro-batches summed in one buffer would
// differ from the sequential run's in the last bits without anything being wrong; so the
// gradients are zeroed before every step and each step's contribution is added to its
// micro-batch's total (forward first: the output layer's share is made in the forward). A slot
// mix-up (another micro-batch's masks, positions or saved tensors) changes those totals.
struct PerMicroBatch {
  std::vector<Grads> grads;
  std::vector<double> losses;
};

inline PerMicroBatch run_schedule(const ModelConfig& c, const std::vector<Step>& schedule, int slots,
                           Communicator* tp = nullptr) {
  StageOptions options;
  options.slots = slots;
  options.tp_comm = tp;
  Stage stage(c, StageRange::whole(c), kBatch, cpu_backend(), nullptr, options);
  init(stage.params());
  const int micro_batches = static_cast<int>(schedule.size() / 2);
  std::vector<Batch> batches;
  for (int k = 0; k < micro_batches; ++k) batches.emplace_back(c, 10 + 7 * k);
  PerMicroBatch out;
  out.grads.resize(micro_batches);
  out.losses.resize(micro_batches);
  for (const Step& step : schedule) {
    stage.params().zero_grads();
    if (step.forward)
      out.losses[step.mb] = stage.forward(step.mb % slots, batches[step.mb].view(), {}, training(40 + step.mb)).loss.loss_sum;
    else
      EXPECT_TRUE(stage.backward(step.mb % slots, {}).empty());  // the first stage returns no input gradient
    Grads& total = out.grads[step.mb];
    for (const auto& [name, g] : grads_of(stage.params())) {
      std::vector<float>& t = total[name];
      t.resize(g.size());
      for (size_t i = 0; i < g.size(); ++i) t[i] += g[i];
    }
  }
  return out;
}

inline std::vector<Step> sequential(int n) {
  std::vector<Step> s;
  for (int k = 0; k < n; ++k) {
    s.push_back({true, k});
    s.push_back({false, k});
  }
  return s;
}

// Runs one training micro-batch through `ranges` (consecutive stages held by this process,
// activations and gradients passed by copy) and expects the uncut model's loss and gradients bit
// for bit.
inline void expect_cut_matches_uncut(const ModelConfig& c, const std::vector<StageRange>& ranges,
                                     const std::string& what, Communicator* tp = nullptr) {
  Batch batch(c, 3);
  const ForwardOptions fo = training(5);

  GptModelOptions whole_options;
  whole_options.tp_comm = tp;
  GptModel whole(c, kBatch, cpu_backend(), nullptr, whole_options);
  init(whole.params());
  const double loss = whole.forward(batch.view(), fo).loss_sum;
  whole.backward();
  const Grads expected = grads_of(whole.params());

  std::vector<std::unique_ptr<Stage>> stages;
  for (const StageRange& r : ranges) {
    StageOptions options;
    options.tp_comm = tp;
    stages.push_back(std::make_unique<Stage>(c, r, kBatch, cpu_backend(), nullptr, options));
    init(stages.back()->params());
  }
  TensorView hidden;
  StageForward out;
  for (auto& stage : stages) {
    out = stage->forward(0, batch.view(), hidden, fo);
    hidden = out.hidden;
  }
  EXPECT_TRUE(out.hidden.empty());
  EXPECT_EQ(out.loss.loss_sum, loss) << what;
  // Tied embeddings: the last stage holds a copy of the word embedding as its output layer, and
  // the two copies' gradients are to be summed over the embedding group. A pipeline sums them
  // after the backward, which may differ from the uncut model in the last bits where a token
  // repeats (float addition is not associative); adding the output layer's share into the first
  // stage's gradient before that stage's backward instead repeats the uncut model's order of
  // accumulation, so everything else can be compared bit for bit.
  if (!c.untie_embeddings_and_output_weights) {
    const Param& copy = stages.back()->params().get("embedding.word_embeddings.weight");
    EXPECT_TRUE(copy.shared_embedding);
    EXPECT_TRUE(stages.front()->params().get("embedding.word_embeddings.weight").shared_embedding);
    copy_tensor(stages.front()->params().get("embedding.word_embeddings.weight").grad, copy.grad);
  }
  TensorView grad;
  for (size_t k = stages.size(); k-- > 0;) {
    HostTensor passed(DType::f32, {grad.empty() ? 1 : grad.numel()});
    if (!grad.empty()) {  // by copy, as a pipeline would send it
      std::memcpy(passed.bytes.data(), grad.data, grad.bytes());
      grad = passed.view().reshape(grad.shape);
    }
    grad = stages[k]->backward(0, grad);
  }
  EXPECT_TRUE(grad.empty());
  Grads got;
  for (auto& stage : stages)
    for (auto& [name, g] : grads_of(stage->params()))
      if (!stage->range().embedding && name == "embedding.word_embeddings.weight")
        continue;  // the tied copy (checked through the first stage's gradient)
      else
        got[name] = g;
  expect_identical(got, expected, what);
}

}  // namespace mt::test
