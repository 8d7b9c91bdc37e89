// Peak memory by category must equal what the shapes imply: parameters, gradients and Adam state
// from the parameter-count formula, activations from the list of tensors each layer keeps.
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "testing.h"

namespace mt {
namespace {

struct Case {
  bool llama;
  AttentionImpl impl;
};

ModelConfig make_config(const Case& k) {
  ModelConfig c;
  c.num_layers = 3;
  c.hidden_size = 48;
  c.num_attention_heads = 6;
  c.seq_length = 20;
  c.vocab_size = 101;
  c.make_vocab_size_divisible_by = 16;
  c.attention_impl = k.impl;
  if (k.llama) {
    c.num_query_groups = 2;
    c.normalization = Normalization::rmsnorm;
    c.activation = Activation::swiglu;
    c.position_embedding_type = PositionEmbedding::rope;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
  }
  c.finalize();
  return c;
}

// Megatron's parameter count (theoretical_memory_usage.py terms, without dividing by TP/PP).
int64_t expected_params(const ModelConfig& c) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size, V = c.padded_vocab_size();
  const int64_t n = c.num_attention_heads, g = c.num_query_groups, d = c.kv_channels;
  const int64_t norm = c.normalization == Normalization::layernorm ? 2 * h : h;
  const int64_t bias = c.add_bias_linear ? 1 : 0;
  const int64_t F = c.activation == Activation::swiglu ? 2 : 1;
  const int64_t attention = h * (n + 2 * g) * d + n * d * h + bias * ((n + 2 * g) * d + h);
  const int64_t mlp = F * f * h + f * h + bias * (F * f + h);
  int64_t total = c.num_layers * (attention + mlp + 2 * norm) + norm + V * h;
  if (c.has_position_table()) total += c.max_position_embeddings * h;
  if (c.untie_embeddings_and_output_weights) total += V * h;
  return total;
}

// Bytes of the tensors the model keeps for backward, listed from the layer definitions.
int64_t expected_activation_bytes(const ModelConfig& c, int64_t b) {
  const int64_t s = c.seq_length, N = s * b, h = c.hidden_size;
  const int64_t n = c.num_attention_heads, g = c.num_query_groups, d = c.kv_channels;
  const int64_t stats = (c.normalization == Normalization::layernorm ? 2 : 1) * N * 4;  // mean?, rstd
  int64_t layer = 0;
  layer += stats;                               // norm1 statistics (its output is recomputed)
  layer += (b * n * s * d + 2 * b * g * s * d) * 4;  // q, k, v
  layer += N * n * d * 4;                       // attention context
  if (c.attention_impl == AttentionImpl::flash)
    layer += b * n * s * 4;                     // log-sum-exp
  else
    layer += b * n * s * s * 4 + (c.attention_dropout > 0 ? b * n * s * s : 0);  // probs + u8 mask
  layer += N * h;                               // attention-output dropout mask (u8)
  layer += N * h * 4;                           // residual
  layer += stats;                               // norm2 statistics
  layer += N * c.fc1_size() * 4;                // fc1 out (the activation output is recomputed)
  layer += N * h;                               // MLP-output dropout mask (u8)
  layer += N * h * 4;                           // layer output
  const int64_t embedding = N * h + N * h * 4;  // dropout mask + output
  // Final-norm statistics, the gradient of its output (computed in the forward by the chunked
  // output layer, so no [N, V] logits are kept), per-token losses.
  const int64_t head = stats + N * h * 4 + N * 4;
  return c.num_layers * layer + embedding + head;
}

class MemoryAccounting : public ::testing::TestWithParam<Case> {};

TEST_P(MemoryAccounting, PeakBytesByCategoryMatchShapes) {
  const ModelConfig c = make_config(GetParam());
  const int64_t b = 3;
  MemoryTracker memory;
  GptModel model(c, b, cpu_backend(), &memory);
  Optimizer optimizer(model.params().params(), cpu_backend(), &memory);
  const int64_t params = expected_params(c);
  EXPECT_EQ(model.params().numel(), params);
  EXPECT_EQ(memory.peak(MemCategory::weights), static_cast<size_t>(params * 4));
  EXPECT_EQ(memory.peak(MemCategory::grads), static_cast<size_t>(params * 4));
  EXPECT_EQ(memory.peak(MemCategory::optimizer), static_cast<size_t>(params * 8));
  EXPECT_EQ(memory.peak(MemCategory::activations), static_cast<size_t>(expected_activation_bytes(c, b)));
  EXPECT_EQ(model.activation_bytes(), memory.peak(MemCategory::activations));
  EXPECT_GT(memory.peak(MemCategory::workspace), 0u);
  EXPECT_EQ(memory.peak_total(), memory.current_total());
  const std::string report = memory.report();
  for (const char* category : {"weights", "grads", "optimizer", "activations", "workspace"})
    EXPECT_NE(report.find(category), std::string::npos) << report;
}

INSTANTIATE_TEST_SUITE_P(Configs, MemoryAccounting,
                         ::testing::Values(Case{false, AttentionImpl::flash}, Case{true, AttentionImpl::flash},
                                           Case{false, AttentionImpl::unfused}));

TEST(MemoryTracker, TracksCurrentAndPeak) {
  MemoryTracker t;
  t.on_alloc(MemCategory::activations, 100);
  t.on_alloc(MemCategory::weights, 50);
  t.on_free(MemCategory::activations, 100);
  t.on_alloc(MemCategory::activations, 30);
  EXPECT_EQ(t.peak(MemCategory::activations), 100u);
  EXPECT_EQ(t.current(MemCategory::activations), 30u);
  EXPECT_EQ(t.peak_total(), 150u);
  EXPECT_THROW(t.on_free(MemCategory::grads, 1), Error);
}

TEST(Arena, MeasuringArenaSizesTheRealOneExactly) {
  Arena measure(MemCategory::workspace);
  measure.alloc(DType::f32, {3, 5});
  measure.alloc(DType::u8, {7});
  Arena real(cpu_backend(), MemCategory::workspace, measure.used(), nullptr);
  const TensorView a = real.alloc(DType::f32, {3, 5});
  const TensorView b = real.alloc(DType::u8, {7});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % Arena::kAlign, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % Arena::kAlign, 0u);
  EXPECT_EQ(real.used(), real.capacity());
  EXPECT_EQ(real.requested(), 3u * 5 * 4 + 7);
  EXPECT_THROW(real.alloc(DType::u8, {1}), Error);
}

// Overlaid alternatives start at one offset; the arena (and the tracker) then hold only the
// largest, and later views come after it.
TEST(Arena, OverlayedAlternativesShareMemory) {
  auto carve = [](Arena& a, TensorView& x, TensorView& y, TensorView& z, TensorView& after) {
    a.alloc(DType::u8, {10});
    a.overlay({[&] { x = a.alloc(DType::f32, {100}); },
               [&] {
                 y = a.alloc(DType::f32, {30});
                 z = a.alloc(DType::f32, {200});
               }});
    after = a.alloc(DType::f32, {1});
  };
  TensorView x, y, z, after;
  Arena measure(MemCategory::workspace);
  carve(measure, x, y, z, after);
  EXPECT_EQ(measure.used(), 64u + 128 + 832 + 64);  // 64-byte padding: 10, (120 + 800 over 400), 4
  MemoryTracker tracker;
  Arena real(cpu_backend(), MemCategory::workspace, measure.used(), &tracker);
  carve(real, x, y, z, after);
  EXPECT_EQ(x.data, y.data);
  EXPECT_EQ(static_cast<char*>(after.data), static_cast<char*>(z.data) + 832);
  EXPECT_EQ(real.requested(), 10u + 120 + 800 + 4);
  EXPECT_EQ(tracker.peak(MemCategory::workspace), real.requested());
  EXPECT_EQ(real.used(), real.capacity());
}

// An alternative that overflows the arena leaves it (and its tracker) as before the overlay.
TEST(Arena, FailedOverlayLeavesNoTrace) {
  MemoryTracker tracker;
  {
    Arena a(cpu_backend(), MemCategory::workspace, 256, &tracker);
    a.alloc(DType::u8, {64});
    EXPECT_THROW(a.overlay({[&] {
                   a.alloc(DType::u8, {64});
                   a.alloc(DType::u8, {1000});
                 }}),
                 Error);
    EXPECT_EQ(a.used(), 64u);
    EXPECT_EQ(a.requested(), 64u);
    EXPECT_EQ(tracker.current(MemCategory::workspace), 64u);
  }
  EXPECT_EQ(tracker.current(MemCategory::workspace), 0u);  // freed exactly what was counted
}

}  // namespace
}  // namespace mt
