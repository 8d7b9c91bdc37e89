// Stages and slots under tensor parallelism (tp = the job's ranks) with sequence parallelism:
// the per-slot state includes this rank's shards and sequence rows, and the tp collectives of
// several stages share one communicator. A model cut into three stages gives the uncut model's
// loss and gradient shards bit for bit; micro-batches in flight in any order give each its own
// gradient; a forward-only pass between a slot's forward and backward changes nothing.
#include "parallel_testing.h"
#include "stage_testing.h"

namespace mt::test {
namespace {

ModelConfig tp_config(bool llama, bool sp) {
  ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.vocab_size = 61;
  c.make_vocab_size_divisible_by = 4;
  c.init_method_std = 0.2f;
  c.ffn_hidden_size = 64;
  if (llama) {
    c.normalization = Normalization::rmsnorm;
    c.activation = Activation::swiglu;
    c.position_embedding_type = PositionEmbedding::rope;
    c.add_bias_linear = false;
    c.untie_embeddings_and_output_weights = true;
  }
  c.tensor_model_parallel_size = world().size();
  c.sequence_parallel = sp;
  c.finalize();
  return c;
}

TEST(TpStages, CutStagesReproduceTheUncutModel) {
  for (bool llama : {false, true})
    for (bool sp : {false, true})
      expect_cut_matches_uncut(tp_config(llama, sp), {{0, 1, true, false}, {1, 3, false, false}, {3, 4, false, true}},
                               std::string(llama ? "llama" : "gpt2") + (sp ? " tp+sp" : " tp"), &world());
}

TEST(TpStages, MicroBatchesInFlightKeepTheirOwnGradients) {
  const ModelConfig c = tp_config(false, true);
  const PerMicroBatch reference = run_schedule(c, sequential(3), 1, &world());
  const PerMicroBatch reverse =
      run_schedule(c, {{true, 0}, {true, 1}, {true, 2}, {false, 2}, {false, 1}, {false, 0}}, 3, &world());
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(reverse.losses[k], reference.losses[k]) << k;
    expect_identical(reverse.grads[k], reference.grads[k], "micro-batch " + std::to_string(k));
  }
}

TEST(TpStages, ForwardOnlyBetweenForwardAndBackwardChangesNothing) {
  const ModelConfig c = tp_config(true, true);
  Batch a(c, 4), b(c, 5);
  Grads grads[2];
  for (int run = 0; run < 2; ++run) {
    GptModelOptions options;
    options.tp_comm = &world();
    GptModel model(c, kBatch, cpu_backend(), nullptr, options);
    init(model.params());
    model.forward(a.view(), training(3));
    if (run == 1) {
      EXPECT_GT(model.forward_only(b.view()).loss_sum, 0.0);
    }
    model.backward();
    grads[run] = grads_of(model.params());
  }
  expect_identical(grads[1], grads[0], "with a forward-only pass in between");
}

}  // namespace
}  // namespace mt::test
