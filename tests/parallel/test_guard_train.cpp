// Parallel layouts with the model on the guard backend (backend/guard.h): tensor, sequence,
// pipeline, data and expert parallelism, the distributed optimizer and overlapped reductions run
// with every parameter, gradient and activation out of the host's reach outside backend calls and
// collectives, so a host access in parallel/, pipeline/, optim/ or model/ crashes the job. The
// kernels and the collectives are the CPU run's, so the curves are equal bit for bit.
#include "backend/guard.h"
#include "train_testing.h"

namespace mt::test {
namespace {

TrainResult run_on(Backend& backend, const ModelConfig& m, const TrainConfig& t) {
  Trainer trainer(m, t, RunContext{&world(), &backend});
  return trainer.run([](const std::string&) {});
}

void expect_guard_equals_cpu(const ModelConfig& m, const TrainConfig& t) {
  const TrainResult cpu = run_on(cpu_backend(), m, t), guard = run_on(guard_backend(), m, t);
  ASSERT_EQ(guard.iterations.size(), cpu.iterations.size());
  for (size_t i = 0; i < cpu.iterations.size(); ++i) {
    EXPECT_EQ(guard.iterations[i].loss, cpu.iterations[i].loss) << "iteration " << i + 1;
    EXPECT_EQ(guard.iterations[i].grad_norm, cpu.iterations[i].grad_norm) << "iteration " << i + 1;
  }
  ASSERT_EQ(guard.evaluations.size(), cpu.evaluations.size());
  for (size_t i = 0; i < cpu.evaluations.size(); ++i)
    EXPECT_EQ(guard.evaluations[i].loss, cpu.evaluations[i].loss) << "evaluation " << i;
}

TrainConfig short_guard_run() {
  TrainConfig t = short_run();
  t.train_iters = 3;
  t.schedule.lr_warmup_iters = 1;
  t.eval_interval = 2;
  t.eval_iters = 1;
  return t;
}

// tp 2 + sp (dp on 4 ranks) with the distributed optimizer and overlapped reduction and gather.
TEST(GuardTrain, TensorSequenceDataParallelEqualTheCpu) {
  ModelConfig m = llama_style();
  m.tensor_model_parallel_size = 2;
  m.sequence_parallel = true;
  TrainConfig t = short_guard_run();
  t.use_distributed_optimizer = t.overlap_grad_reduce = t.overlap_param_gather = true;
  t.ddp_bucket_size = 20000;
  expect_guard_equals_cpu(m, t);
}

// pp 2 (1F1B, dp on 4 ranks): the stages' messages, the tied embedding's all-reduce.
TEST(GuardTrain, PipelineEqualsTheCpu) {
  TrainConfig t = short_guard_run();
  t.pipeline.pp = 2;
  expect_guard_equals_cpu(gpt2_style(), t);
}

// Experts over ep = world (alltoall dispatcher) with the distributed optimizer over expert-dp.
TEST(GuardTrain, ExpertParallelEqualsTheCpu) {
  ModelConfig m = llama_style();
  m.moe.num_experts = 4;
  m.moe.router.topk = 2;
  m.moe.ffn_hidden_size = 48;
  m.moe.expert_model_parallel_size = world().size();
  m.moe.expert_tensor_parallel_size = 1;
  m.moe.aux_loss_coeff = 1e-2;
  m.moe.dispatcher = MoeDispatcher::alltoall;
  TrainConfig t = short_guard_run();
  t.use_distributed_optimizer = true;
  expect_guard_equals_cpu(m, t);
  m.moe.dispatcher = MoeDispatcher::allgather;
  expect_guard_equals_cpu(m, t);
}

}  // namespace
}  // namespace mt::test
