// The model on the guard backend (backend/guard.h): its memory is out of the host's reach outside
// backend calls, so any host read or write of a parameter, gradient, activation or optimizer
// state from model/, train/, infer/, optim/, parallel/ or pipeline/ crashes these tests. The
// kernels are the CPU backend's, so every curve, checkpoint and generated token must equal the
// CPU run's bit for bit. Covered: training (GPT and Llama style, dropout, bf16, fp16 with loss
// scaling, gradient accumulation, recomputation, MoE with auxiliary losses and expert bias,
// evaluation), checkpoint save and resume (on guard and across guard and CPU), and inference
// (the engine's logits, greedy generation, weights read from a checkpoint).
#include <cstring>
#include <vector>

#include "backend/guard.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "testing.h"
#include "train/checkpoint_reader.h"
#include "train/trainer.h"

namespace mt {
namespace {

ModelConfig gpt_model(DType dtype = DType::f32) {
  ModelConfig m = test::tiny_gpt(false, 16);  // dropout 0.1 in attention and hidden states
  m.params_dtype = dtype;
  return m;
}

ModelConfig llama_model(DType dtype = DType::f32) {
  ModelConfig m = test::tiny_gpt(true, 16);  // RoPE, SwiGLU, RMSNorm, 4 heads over 2 query groups
  m.params_dtype = dtype;
  return m;
}

// Mixtral-like: top-2 of 4 experts, a shared expert, load-balancing and z losses.
ModelConfig moe_model() {
  ModelConfig m = llama_model();
  m.moe.num_experts = 4;
  m.moe.router.topk = 2;
  m.moe.ffn_hidden_size = 16;
  m.moe.shared_expert_intermediate_size = 12;
  m.moe.aux_loss_coeff = 1e-2;
  m.moe.z_loss_coeff = 1e-3;
  return m;
}

// Two micro-batches per global batch (gradient accumulation), an evaluation midway and after.
TrainConfig short_run(int64_t iterations = 4, DType dtype = DType::f32) {
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 4;
  t.train_iters = iterations;
  t.log_interval = 100;
  t.eval_interval = 2;
  t.eval_iters = 1;
  t.seed = 5;
  t.schedule.lr = 3e-3;
  t.schedule.lr_warmup_iters = 1;
  t.loss_scale.bf16 = dtype == DType::bf16;
  t.loss_scale.fp16 = dtype == DType::f16;
  t.loss_scale.initial_loss_scale = 65536.0;
  return t;
}

TrainResult run_on(Backend& backend, const ModelConfig& m, const TrainConfig& t) {
  Trainer trainer(m, t, RunContext{nullptr, &backend});
  return trainer.run([](const std::string&) {});
}

// Same losses, norms, learning rates, scales and evaluations, to the bit.
void expect_same_run(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(got.iterations.size(), want.iterations.size());
  for (size_t i = 0; i < want.iterations.size(); ++i) {
    const IterationStats &a = got.iterations[i], &b = want.iterations[i];
    EXPECT_EQ(a.iteration, b.iteration);
    EXPECT_EQ(a.loss, b.loss) << "iteration " << b.iteration;
    if (!b.skipped) {  // NaN when skipped
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "iteration " << b.iteration;
    }
    EXPECT_EQ(a.lr, b.lr) << "iteration " << b.iteration;
    EXPECT_EQ(a.skipped, b.skipped) << "iteration " << b.iteration;
    EXPECT_EQ(a.loss_scale, b.loss_scale) << "iteration " << b.iteration;
    EXPECT_EQ(a.moe.tokens_per_expert, b.moe.tokens_per_expert) << "iteration " << b.iteration;
    EXPECT_EQ(a.moe.losses, b.moe.losses) << "iteration " << b.iteration;
  }
  ASSERT_EQ(got.evaluations.size(), want.evaluations.size());
  for (size_t i = 0; i < want.evaluations.size(); ++i)
    EXPECT_EQ(got.evaluations[i].loss, want.evaluations[i].loss) << "evaluation " << i;
}

void expect_guard_equals_cpu(const ModelConfig& m, const TrainConfig& t) {
  const TrainResult cpu = run_on(cpu_backend(), m, t);
  const TrainResult guard = run_on(guard_backend(), m, t);
  ASSERT_FALSE(cpu.iterations.empty());
  EXPECT_GT(cpu.iterations.back().num_tokens, 0.0);
  expect_same_run(guard, cpu);
}

TEST(GuardDevice, GptTrainsAsOnTheCpu) { expect_guard_equals_cpu(gpt_model(), short_run()); }

TEST(GuardDevice, LlamaTrainsAsOnTheCpu) { expect_guard_equals_cpu(llama_model(), short_run()); }

TEST(GuardDevice, Bf16AndFp16TrainAsOnTheCpu) {
  expect_guard_equals_cpu(llama_model(DType::bf16), short_run(4, DType::bf16));
  expect_guard_equals_cpu(gpt_model(DType::f16), short_run(4, DType::f16));
}

TEST(GuardDevice, Fp16OverflowSkipsAsOnTheCpu) {
  TrainConfig t = short_run(4, DType::f16);
  t.loss_scale.initial_loss_scale = 4294967296.0;  // the first steps overflow and are skipped
  const TrainResult cpu = run_on(cpu_backend(), gpt_model(DType::f16), t);
  ASSERT_TRUE(cpu.iterations.front().skipped);
  expect_same_run(run_on(guard_backend(), gpt_model(DType::f16), t), cpu);
}

TEST(GuardDevice, RecomputationTrainsAsOnTheCpu) {
  ModelConfig full = llama_model(DType::bf16);
  full.recompute_granularity = RecomputeGranularity::full;
  full.recompute_method = RecomputeMethod::uniform;
  expect_guard_equals_cpu(full, short_run(3, DType::bf16));
  ModelConfig selective = gpt_model();
  selective.recompute_granularity = RecomputeGranularity::selective;
  selective.recompute_mlp = true;
  expect_guard_equals_cpu(selective, short_run(3));
}

TEST(GuardDevice, MoeTrainsAsOnTheCpu) {
  expect_guard_equals_cpu(moe_model(), short_run());
  ModelConfig global = moe_model();
  global.moe.load_balancing = MoeLoadBalancing::global_aux_loss;  // running counts kept on the host
  expect_guard_equals_cpu(global, short_run(3));
  ModelConfig biased = moe_model();
  biased.moe.router.score_function = MoeScoreFunction::sigmoid;
  biased.moe.expert_bias = true;  // updated from the step's counts after each step
  biased.moe.bias_update_rate = 0.25f;
  biased.moe.aux_loss_coeff = 0.0;
  biased.moe.dispatcher = MoeDispatcher::alltoall;
  expect_guard_equals_cpu(biased, short_run(3));
}

// ---- Checkpoints ----

std::vector<uint8_t> host_bytes(const TensorView& t) {
  std::vector<uint8_t> out(t.bytes());
  backend_for(t.device).copy_to_host(out.data(), t.data, t.bytes());
  return out;
}

// Trained 6 iterations on `save_on`, saving at 3 and 6; resumed from 3 on `resume_on`: both equal
// the CPU run's iterations and final weights.
void expect_exact_resume(const ModelConfig& m, DType dtype, Backend& save_on, Backend& resume_on) {
  test::TempDir dir;
  TrainConfig whole = short_run(6, dtype);
  whole.eval_iters = 0;
  whole.eval_interval.reset();
  Trainer reference(m, whole, RunContext::cpu());
  const TrainResult want = reference.run([](const std::string&) {});
  TrainConfig saving = whole;
  saving.checkpoint.save = dir.path();
  saving.checkpoint.save_interval = 3;
  expect_same_run(run_on(save_on, m, saving), want);
  TrainConfig rest = whole;
  rest.checkpoint.load = dir.path();
  rest.checkpoint.ckpt_step = 3;
  Trainer resumed(m, rest, RunContext{nullptr, &resume_on});
  ASSERT_EQ(resumed.load_checkpoint(dir.path()), 3);
  const TrainResult got = resumed.run([](const std::string&) {});
  TrainResult tail;
  tail.iterations.assign(want.iterations.begin() + 3, want.iterations.end());
  expect_same_run(got, tail);
  for (const Param& p : resumed.model().params().params())
    EXPECT_TRUE(host_bytes(p.value) == host_bytes(reference.model().params().get(p.name).value)) << p.name;
}

TEST(GuardDevice, CheckpointSavedOnGuardResumesExactly) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    expect_exact_resume(llama_model(dtype), dtype, guard_backend(), guard_backend());
    expect_exact_resume(llama_model(dtype), dtype, guard_backend(), cpu_backend());
    expect_exact_resume(llama_model(dtype), dtype, cpu_backend(), guard_backend());
  }
}

TEST(GuardDevice, MoeCheckpointWithExpertBiasResumesExactly) {
  ModelConfig m = moe_model();
  m.moe.router.score_function = MoeScoreFunction::sigmoid;
  m.moe.expert_bias = true;
  m.moe.aux_loss_coeff = 0.0;
  expect_exact_resume(m, DType::f32, guard_backend(), guard_backend());
}

// ---- Inference ----
// Disabled until ops/attention.cpp's check_kv_cache stops reading the step's slots and positions on
// the host before routing (it crashes here, and would read device memory on CUDA); with that
// check moved into the kernel or made on host data only, both pass.

std::unique_ptr<InferenceEngine> engine_on(Backend& backend, ModelConfig c, int64_t slots) {
  c.max_position_embeddings = 24;
  c.finalize();
  EngineOptions o;
  o.slots = slots;
  o.max_step_tokens = 8;  // prompts prefilled in pieces
  return std::make_unique<InferenceEngine>(c, backend, nullptr, o);
}

std::vector<GenerationRequest> requests() {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r;
    for (int k = 0; k < 5 + 3 * i; ++k) r.prompt.push_back((k * 7 + i * 3 + 1) % 37);
    r.tokens_to_generate = 6;
    r.log_probs = true;
    r.top_n_log_probs = 2;
    r.sampling.top_k = i == 1 ? 0 : 1;  // one sampled request
    r.sampling.seed = 3;
    out.push_back(r);
  }
  return out;
}

void expect_same_generation(const std::vector<GenerationResult>& got, const std::vector<GenerationResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].prompt_log_probs, want[i].prompt_log_probs) << "request " << i;
    EXPECT_EQ(got[i].log_probs, want[i].log_probs) << "request " << i;
    EXPECT_EQ(got[i].top_log_probs, want[i].top_log_probs) << "request " << i;
  }
}

TEST(GuardDevice, GenerationEqualsTheCpu) {
  for (const ModelConfig& m : {gpt_model(), llama_model(), moe_model()}) {
    auto cpu = engine_on(cpu_backend(), m, 2), guard = engine_on(guard_backend(), m, 2);
    cpu->params().init(11);
    guard->params().init(11);
    Generator on_cpu(*cpu, -1), on_guard(*guard, -1);
    const std::vector<GenerationResult> want = on_cpu.run(requests());
    ASSERT_EQ(want[0].tokens.size(), 6u);
    expect_same_generation(on_guard.run(requests()), want);
  }
}

// Weights trained on guard, saved, and read by a guard engine generate what the CPU engine
// generates from the same checkpoint.
TEST(GuardDevice, GenerationFromACheckpointEqualsTheCpu) {
  test::TempDir dir;
  TrainConfig t = short_run(2);
  t.eval_iters = 0;
  t.eval_interval.reset();
  t.checkpoint.save = dir.path();
  run_on(guard_backend(), llama_model(), t);
  std::vector<std::vector<GenerationResult>> results;
  for (Backend* backend : {&cpu_backend(), &guard_backend()}) {
    auto engine = engine_on(*backend, llama_model(), 1);
    CheckpointReader checkpoint(dir.path(), std::nullopt);
    checkpoint.read_weights(engine->params().params());
    Generator g(*engine, -1);
    results.push_back(g.run(requests()));
  }
  expect_same_generation(results[1], results[0]);
}

}  // namespace
}  // namespace mt
