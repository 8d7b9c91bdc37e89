// Activation recomputation must not change a single bit of the loss or the gradients (the rerun
// forward uses the same weights, inputs and dropout masks), and must shrink saved activations.
#include "backend/arena.h"
#include "model/gpt.h"
#include "testing.h"

namespace mt {
namespace {

struct Setting {
  RecomputeGranularity granularity;
  RecomputeMethod method;
  int64_t num_layers;
  bool mlp = false;  // --recompute-modules mlp (with selective)
};

ModelConfig config(DType dtype, const Setting& r) {
  ModelConfig c;
  c.num_layers = 3;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.seq_length = 12;
  c.vocab_size = 50;
  c.make_vocab_size_divisible_by = 16;
  c.normalization = Normalization::rmsnorm;
  c.activation = Activation::swiglu;
  c.position_embedding_type = PositionEmbedding::rope;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.params_dtype = dtype;
  c.recompute_granularity = r.granularity;
  c.recompute_method = r.method;
  c.recompute_num_layers = r.num_layers;
  c.recompute_mlp = r.mlp;
  c.finalize();
  return c;
}

struct Result {
  double loss;
  std::vector<std::vector<float>> grads;
  size_t activation_bytes;
};

Result run(DType dtype, const Setting& r) {
  const ModelConfig c = config(dtype, r);
  GptModel model(c, 2, cpu_backend(), nullptr);
  model.params().init(9);
  test::HostTensor tokens = test::randint({2, c.seq_length}, 50, 1), labels = test::randint({2, c.seq_length}, 50, 2);
  ForwardOptions fo;
  fo.first_sample = 4;
  fo.grad_scale = 0.5f;
  model.params().zero_grads();
  Result out;
  out.loss = model.forward({tokens.view(), labels.view(), TensorView()}, fo).loss_sum;
  model.backward();
  for (const Param& p : model.params().params()) out.grads.emplace_back(p.grad.f32(), p.grad.f32() + p.grad.numel());
  out.activation_bytes = model.activation_bytes();
  return out;
}

TEST(Recompute, EveryMethodGivesBitIdenticalGradients) {
  const Setting none{RecomputeGranularity::none, RecomputeMethod::uniform, 1};
  const Setting settings[] = {
      {RecomputeGranularity::full, RecomputeMethod::uniform, 1},
      {RecomputeGranularity::full, RecomputeMethod::uniform, 2},  // groups [0, 2) and [2, 3)
      {RecomputeGranularity::full, RecomputeMethod::uniform, 5},  // one group of all layers
      {RecomputeGranularity::full, RecomputeMethod::block, 2},
      {RecomputeGranularity::selective, RecomputeMethod::uniform, 1},
      {RecomputeGranularity::selective, RecomputeMethod::uniform, 1, /*mlp=*/true},
  };
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Result base = run(dtype, none);
    for (const Setting& s : settings) {
      const Result r = run(dtype, s);
      EXPECT_EQ(r.loss, base.loss);
      ASSERT_EQ(r.grads.size(), base.grads.size());
      for (size_t i = 0; i < r.grads.size(); ++i)
        ASSERT_EQ(r.grads[i], base.grads[i]) << "parameter " << i << ", " << dtype_name(dtype) << ", method "
                                             << static_cast<int>(s.method) << ", layers " << s.num_layers;
      // Saving needs groups smaller than the whole stack (a group's activations coexist in the
      // backward, as in Megatron).
      if ((s.granularity == RecomputeGranularity::full && s.num_layers < 3) || s.mlp) {
        EXPECT_LT(r.activation_bytes, base.activation_bytes);
      }
    }
  }
}

TEST(Recompute, SavedActivationsShrinkByTheRecomputedLayers) {
  const Setting none{RecomputeGranularity::none, RecomputeMethod::uniform, 1};
  const ModelConfig c = config(DType::f32, none);
  // One layer's saved bytes (L) and its output's (O), measured from the layer definition.
  Arena measure(MemCategory::activations);
  alloc_layer_activations(measure, c, {c.seq_length, 2}, DType::f32, MlpKinds{true, false});
  const size_t L = measure.requested(), O = static_cast<size_t>(c.seq_length * 2 * c.hidden_size * 4);
  const size_t base = run(DType::f32, none).activation_bytes;
  auto bytes = [](RecomputeMethod method, int64_t layers) {
    return run(DType::f32, {RecomputeGranularity::full, method, layers}).activation_bytes;
  };
  // Recomputed layers keep only the last output of their group; the others share one pool of
  // slots as large as a group (the slot of a group's last layer has no output of its own).
  EXPECT_EQ(bytes(RecomputeMethod::block, 1), base);                  // 1 slot (L - O) + 1 output
  EXPECT_EQ(bytes(RecomputeMethod::block, 2), base - L + O);          // 1 slot + 2 outputs, for 2 layers
  EXPECT_EQ(bytes(RecomputeMethod::uniform, 1), base - 2 * L + 2 * O);  // 1 slot + 3 outputs, for 3 layers
  EXPECT_EQ(bytes(RecomputeMethod::uniform, 3), base);                // one group: everything coexists
  // --recompute-modules mlp: each layer drops exactly fc1's output.
  const size_t fc1_bytes = static_cast<size_t>(c.seq_length * 2 * c.fc1_size() * 4);
  const Setting mlp{RecomputeGranularity::selective, RecomputeMethod::uniform, 1, true};
  EXPECT_EQ(run(DType::f32, mlp).activation_bytes, base - 3 * fc1_bytes);
}

TEST(Recompute, BadSettingsAreRejected) {
  ModelConfig c = config(DType::f32, {RecomputeGranularity::none, RecomputeMethod::uniform, 1});
  c.recompute_granularity = RecomputeGranularity::full;
  c.recompute_method = RecomputeMethod::block;
  c.recompute_num_layers = 4;
  EXPECT_THROW(c.finalize(), Error);
  c.recompute_num_layers = 0;
  EXPECT_THROW(c.finalize(), Error);
}

}  // namespace
}  // namespace mt
