// plan/'s model-state bytes under the distributed optimizer over every rank of the job: each
// data-parallel rank's AdamW state is its shard of every (padded) bucket, as allocated.
#include "model/stage.h"
#include "optim/optimizer.h"
#include "parallel_testing.h"
#include "plan/model_state.h"

namespace mt::test {
namespace {

TEST(PlanMemory, TheDistributedOptimizersShardIsTheFormulas) {
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const bool overlap : {false, true}) {
      ModelConfig c;
      c.num_layers = 2;
      c.hidden_size = 40;
      c.num_attention_heads = 4;
      c.seq_length = 8;
      c.vocab_size = 70;
      c.params_dtype = dtype;
      c.finalize();
      MemoryTracker memory;
      StageOptions options;
      options.slots = 1;
      options.ddp.data_parallel_size = world().size();
      options.ddp.use_distributed_optimizer = true;
      options.ddp.overlap_grad_reduce = overlap;
      options.ddp.bucket_size = overlap ? 4000 : 0;  // several buckets, each padded
      const StageRange range{0, 2, true, true};
      Stage stage(c, range, 1, cpu_backend(), &memory, options);
      AdamW adam({{&stage.params().params(), {&stage.params().layout(), &world()}}}, cpu_backend(), &memory);
      const ModelStateBytes expected = model_state_bytes(c, range, options.ddp);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::weights)), expected.weights);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::grads)), expected.grads);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::optimizer)), expected.optimizer);
    }
}

}  // namespace
}  // namespace mt::test
