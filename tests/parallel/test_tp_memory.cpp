// What tensor and sequence parallelism save per rank: the shards of the split parameters add up to
// the whole model (the parameters every rank holds whole are counted t times), and the saved
// activations shrink with t and shrink again with sequence parallelism.
#include "model/gpt.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

ModelConfig config(int64_t tp, bool sp) {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 128;
  c.num_attention_heads = 8;
  c.num_query_groups = 4;
  c.activation = Activation::swiglu;
  c.seq_length = 64;
  c.vocab_size = 512;
  c.untie_embeddings_and_output_weights = true;
  c.tensor_model_parallel_size = tp;
  c.sequence_parallel = sp;
  c.finalize();
  return c;
}

TEST(TpMemory, ShardsAddUpToTheWholeModel) {
  const int t = world().size();
  const ParamStore whole(config(1, false), cpu_backend(), nullptr);
  const ParamStore mine(config(t, false), cpu_backend(), nullptr, world().rank());
  int64_t replicated = 0;
  for (const Param& p : mine.params()) {
    EXPECT_EQ(p.value.numel() * (p.shard.sharded() ? t : 1), p.full_shape.numel()) << p.name;
    if (!p.shard.sharded()) replicated += p.value.numel();
  }
  int32_t total = static_cast<int32_t>(mine.numel());
  world().all_reduce(TensorView(&total, DType::i32, {1}), ReduceOp::sum);
  EXPECT_EQ(total, whole.numel() + (t - 1) * replicated);
}

TEST(TpMemory, ActivationsShrinkWithTensorAndSequenceParallelism) {
  const int t = world().size();
  GptModelOptions options;
  options.tp_comm = &world();
  const GptModel single(config(1, false), 2, cpu_backend(), nullptr);
  const GptModel tp(config(t, false), 2, cpu_backend(), nullptr, options);
  const GptModel sp(config(t, true), 2, cpu_backend(), nullptr, options);
  EXPECT_LT(tp.activation_bytes(), single.activation_bytes());
  EXPECT_LT(sp.activation_bytes(), tp.activation_bytes());
  // Under SP every saved tensor is split t ways (heads, MLP width or sequence) except the
  // per-token losses [s·b]; the rest of the bound is the arena's 64-byte alignment padding.
  EXPECT_LE(sp.activation_bytes(), single.activation_bytes() / t + 64 * 2 * sizeof(float) + 4096);
}

}  // namespace
}  // namespace mt::test
