// Helpers of the end-to-end layout tests (test_tp_train.cpp, test_pp_train.cpp): two small model
// styles, a short run with dropout on, and the comparison of a parallel layout's training against
// the single-rank run. Weights and dropout masks are drawn by whole-tensor index and global layer,
// so layouts differ only in the order of floating-point reductions.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "parallel_testing.h"
#include "train/trainer.h"

namespace mt::test {

inline ModelConfig gpt2_style() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 8;
  m.seq_length = 32;
  m.vocab_size = 512;  // a multiple of 128·t: the padded vocabulary is the same for every t
  m.activation = Activation::gelu_tanh;
  return m;  // LayerNorm, biases, learned positions, tied output layer, dropout 0.1
}

inline ModelConfig llama_style() {
  ModelConfig m = gpt2_style();
  m.num_query_groups = 4;
  m.normalization = Normalization::rmsnorm;
  m.activation = Activation::swiglu;
  m.position_embedding_type = PositionEmbedding::rope;
  m.add_bias_linear = false;
  m.untie_embeddings_and_output_weights = true;
  return m;
}

inline TrainConfig short_run() {
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 8;  // 4 micro-batches without dp; dp ranks split them
  t.train_iters = 20;
  t.log_interval = 100;
  t.eval_iters = 0;
  t.seed = 42;
  t.schedule.lr = 2e-3;
  t.schedule.lr_warmup_iters = 3;
  t.schedule.lr_decay_style = "cosine";
  t.log_params_norm = true;  // compared across layouts too
  return t;
}

// Trains `base` with `run` on this rank alone and on the whole job with tensor parallelism tp
// (sp: sequence parallel), base's context parallelism and run.pipeline.pp stages (data
// parallelism takes the rest), and
// expects the same loss curve, gradient norms and evaluation losses; with tp = 1 also the same
// final weights (each rank compares the parameters it holds, by their global names).
inline void expect_same_curve(const ModelConfig& base, int64_t tp, bool sp, const TrainConfig& run = short_run()) {
  SCOPED_TRACE("tp " + std::to_string(tp) + (sp ? " + sp" : "") +
               (base.context_parallel_size > 1 ? ", cp " + std::to_string(base.context_parallel_size) + " " +
                                                     cp_comm_type_name(base.cp_comm_type)
                                               : "") +
               ", pp " + std::to_string(run.pipeline.pp) + " on " +
               std::to_string(world().size()) + " ranks" + (run.use_distributed_optimizer ? ", distributed optimizer" : "") +
               (run.num_distributed_optimizer_instances > 1
                    ? " in " + std::to_string(run.num_distributed_optimizer_instances) + " instances"
                    : ""));
  TrainConfig alone = run;
  alone.pipeline = PartitionConfig{};
  alone.num_distributed_optimizer_instances = 1;  // one rank: one instance
  ModelConfig single = base;  // this rank alone holds every expert and whole sequences
  single.moe.expert_model_parallel_size = single.moe.expert_tensor_parallel_size = 1;
  single.context_parallel_size = 1;
  Trainer reference(single, alone);  // this rank alone, tp = 1 (and dp = 1: the distributed optimizer shards nothing)
  const TrainResult want = reference.run([](const std::string&) {});
  ModelConfig m = base;
  m.tensor_model_parallel_size = tp;
  m.sequence_parallel = sp;
  Trainer parallel(m, run, &world());
  const TrainResult got = parallel.run([](const std::string&) {});
  ASSERT_EQ(got.iterations.size(), want.iterations.size());
  double worst = 0.0;
  for (size_t i = 0; i < want.iterations.size(); ++i) {
    const IterationStats &a = got.iterations[i], &b = want.iterations[i];
    EXPECT_NEAR(a.loss, b.loss, 2e-5) << "iteration " << i + 1;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-4 * b.grad_norm) << "iteration " << i + 1;
    if (a.params_norm && b.params_norm)  // a run's own TrainConfig may leave it off
      EXPECT_NEAR(*a.params_norm, *b.params_norm, 1e-6 * *b.params_norm) << "params norm, iteration " << i + 1;
    worst = std::max(worst, std::fabs(a.loss - b.loss));
  }
  ASSERT_EQ(got.evaluations.size(), want.evaluations.size());
  for (size_t i = 0; i < want.evaluations.size(); ++i)
    EXPECT_NEAR(got.evaluations[i].loss, want.evaluations[i].loss, 2e-5) << "evaluation " << i;
  // The run must have learned something, or equal curves would prove little.
  EXPECT_LT(want.iterations.back().loss, want.iterations.front().loss - 0.3);
  // Data parallelism alone: every rank holds whole parameters, which must end where one rank's
  // do (this also sees the last step's update and, under the distributed optimizer, its gather).
  // Adam turns last-bit gradient differences of near-zero gradients into steps of up to lr = 2e-3
  // (measured worst: 8e-6 over 20 steps); a missed update or gather is off by the 1e-2 that 20
  // steps move a weight.
  // Expert weights split over ep (or etp) are compared shard by shard with the whole tensors.
  if (tp == 1) {
    double worst_weight = 0.0;
    for (int c = 0; c < parallel.chunks(); ++c)
      for (ParamStore* store : parallel.model(c).param_stores())
        for (const Param& p : store->params()) {
          const Param& q = reference.model().param(p.name);
          for (int64_t i = 0; i < p.value.numel(); ++i) {
            const int64_t at = shard_global_index(p.full_shape, p.shard, p.shard_size, p.shard_rank, p.shard_offset + i);
            worst_weight = std::max(worst_weight, std::fabs(double(p.value.f32()[i]) - q.value.f32()[at]));
          }
        }
    EXPECT_LT(worst_weight, 1e-4) << "final weights";
    if (world().rank() == 0) std::printf("    largest final-weight difference: %.2e\n", worst_weight);
  }
  if (world().rank() == 0) std::printf("    largest loss difference: %.2e\n", worst);
}

// fp16 with Megatron's initial loss scale 2^32 (hysteresis 1): the first of 12 steps overflow and
// are skipped. The layout of `run` must skip the same steps with the same loss scales as one rank
// (one found_inf decision for all ranks), and track its curve to fp16's precision.
inline void expect_same_overflow_skips(TrainConfig run) {
  ModelConfig m = gpt2_style();
  m.params_dtype = DType::f16;
  run.train_iters = 12;
  run.loss_scale.fp16 = true;
  run.loss_scale.hysteresis = 1;
  TrainConfig alone = run;
  alone.pipeline = PartitionConfig{};
  alone.num_distributed_optimizer_instances = 1;  // one rank: one instance
  alone.use_distributed_optimizer = false;
  const TrainResult single = Trainer(m, alone).run([](const std::string&) {});
  const TrainResult parallel = Trainer(m, run, &world()).run([](const std::string&) {});
  ASSERT_EQ(parallel.iterations.size(), single.iterations.size());
  int skipped = 0;
  for (size_t i = 0; i < single.iterations.size(); ++i) {
    const IterationStats &a = parallel.iterations[i], &b = single.iterations[i];
    EXPECT_EQ(a.skipped, b.skipped) << "iteration " << i + 1;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << "iteration " << i + 1;
    EXPECT_NEAR(a.loss, b.loss, 1e-3) << "iteration " << i + 1;
    skipped += b.skipped;
  }
  EXPECT_GT(skipped, 0);  // or the check above proves little
  EXPECT_LT(skipped, 12);
}

}  // namespace mt::test
