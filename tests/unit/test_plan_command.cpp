// `megatron plan` as a user runs it: a train command line as it stands plus --world-size; --json
// gives one object whose ranks list holds every rank's bytes, which are plan_memory's for that
// rank's pipeline stage (the same on every rank of a stage) and add up to its peak; the text
// names every pipeline rank; bad layouts fail with one message naming the numbers.
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/error.h"
#include "backend/backend.h"
#include "plan/memory_plan.h"
#include "testing.h"
#include "train/trainer.h"

namespace mt {
namespace {

using json = nlohmann::json;

// A train command line (data flags included: plan ignores them).
std::vector<std::string> train_line() {
  return {"--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
          "--micro-batch-size", "2", "--global-batch-size", "16", "--mock-data", "--tokenizer-type", "NullTokenizer",
          "--vocab-size", "1000", "--lr", "1e-3", "--train-iters", "10", "--bf16", "--save", "ckpt"};
}

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string plan_output(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  const int rc = cmd_plan(args);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0);
  return out;
}

std::string plan_error(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  std::string message;
  try {
    cmd_plan(args);
  } catch (const Error& e) {
    message = e.what();
  }
  ::testing::internal::GetCapturedStdout();
  return message;
}

TEST(PlanCommand, JsonListsEveryRankWithPlanMemorysBytes) {
  const std::vector<std::string> layout = {"--tensor-model-parallel-size", "2",          "--pipeline-model-parallel-size",
                                           "2",                             "--world-size", "8",
                                           "--use-distributed-optimizer",   "--sequence-parallel"};
  const json plan = json::parse(plan_output(with(with(train_line(), layout), {"--json"})));
  EXPECT_EQ(plan.at("world_size"), 8);
  EXPECT_EQ(plan.at("data_parallel_size"), 2);
  EXPECT_EQ(plan.at("num_microbatches"), 4);
  EXPECT_DOUBLE_EQ(plan.at("pipeline_bubble_fraction").get<double>(), 0.25);
  // What the Trainer would build, planned directly.
  ModelConfig m;
  m.num_layers = 4;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.seq_length = 64;
  m.vocab_size = 1000;
  m.params_dtype = DType::bf16;
  m.tensor_model_parallel_size = 2;
  m.sequence_parallel = true;
  TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 16;
  t.train_iters = 10;
  t.pipeline.pp = 2;
  t.use_distributed_optimizer = true;
  t.loss_scale.bf16 = true;
  const std::vector<PipelineRankMemory> want = plan_memory(training_layout(m, t, 8, cpu_backend().max_threads()));
  ASSERT_EQ(plan.at("ranks").size(), 8u);
  for (const json& r : plan.at("ranks")) {
    const RankMemory& w = want.at(r.at("pp_rank").get<size_t>()).total;
    EXPECT_EQ(r.at("pp_rank"), r.at("rank").get<int>() / 4) << "Megatron's default order puts pp outermost";
    EXPECT_EQ(r.at("weights_bytes"), w.weights);
    EXPECT_EQ(r.at("grads_bytes"), w.grads);
    EXPECT_EQ(r.at("optimizer_bytes"), w.optimizer);
    EXPECT_EQ(r.at("activations_bytes"), w.activations);
    EXPECT_EQ(r.at("workspace_bytes"), w.workspace);
    int64_t sum = 0;
    for (const char* k : {"weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "workspace_bytes",
                          "comm_bytes"})
      sum += r.at(k).get<int64_t>();
    EXPECT_EQ(r.at("peak_bytes"), sum);
    EXPECT_GT(sum, 0);
  }
  // The first stage holds more micro-batches in flight under 1F1B.
  EXPECT_GT(plan.at("ranks")[0].at("activations_bytes").get<int64_t>(),
            plan.at("ranks")[7].at("activations_bytes").get<int64_t>());
}

TEST(PlanCommand, TextNamesEveryPipelineRankAndItsChunks) {
  const std::string out = plan_output(with(train_line(), {"--pipeline-model-parallel-size", "2",
                                                           "--num-virtual-stages-per-pipeline-rank", "2",
                                                           "--world-size", "4"}));
  for (const char* expected : {"pipeline rank 0 (ranks 0,1)", "pipeline rank 1 (ranks 2,3)", "layers 0..0 + embedding",
                               "layers 3..3 + output layer and loss", "2 chunks per rank", "FLOPs per iteration",
                               "pipeline bubble: 0.1250"})
    EXPECT_NE(out.find(expected), std::string::npos) << expected << " not in:\n" << out;
}

TEST(PlanCommand, BadLayoutsFailWithOneMessage) {
  struct Case {
    std::vector<std::string> extra;
    const char* expected;
  };
  const Case cases[] = {
      {{"--tensor-model-parallel-size", "4", "--world-size", "6"}, "world size 6 is not divisible"},
      {{"--pipeline-model-parallel-size", "3", "--world-size", "3"}, "--num-layers 4 is not divisible"},
      {{"--world-size", "0"}, "--world-size must be between 1 and 1000000"},
      {{"--world-size", "3"}, "global batch"},
      {{"--word-size", "3"}, "did you mean --world-size"},
  };
  for (const Case& c : cases) {
    const std::string message = plan_error(with(train_line(), c.extra));
    EXPECT_NE(message.find(c.expected), std::string::npos) << "got: " << message;
  }
}

}  // namespace
}  // namespace mt
