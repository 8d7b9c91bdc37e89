// `megatron plan` as a user runs it: a train command line as it stands plus --world-size; --json
// gives one object whose ranks list holds every rank's bytes, which are plan_memory's for that
// rank's pipeline stage (the same on every rank of a stage) and add up to its peak; the text
// names every pipeline rank; bad layouts fail with one message naming the numbers.
#include <algorithm>
#include <sstream>

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
  int rc = 1;
  try {
    rc = cmd_plan(args);
  } catch (...) {
    ::testing::internal::GetCapturedStdout();  // the failure's report must reach the terminal
    throw;
  }
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

// plan reads the layout, not the run: Megatron's scripts pass the learning rate and the length,
// and a plan without them is the same plan.
TEST(PlanCommand, NeedsNoLearningRateOrRunLength) {
  std::vector<std::string> bare;
  const std::vector<std::string> line = train_line();
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == "--lr" || line[i] == "--train-iters") {
      ++i;
      continue;
    }
    bare.push_back(line[i]);
  }
  EXPECT_EQ(plan_output(bare), plan_output(line));
}

// Under --step-batch-size-schedule the plan is for the final, largest batch: 2 then 8 micro-batches
// per rank, the same memory as a fixed batch of 32 (the most micro-batches in flight of any step).
TEST(PlanCommand, BatchSchedulePlansTheFinalBatch) {
  std::vector<std::string> line = train_line();
  line.erase(std::find(line.begin(), line.end(), "--global-batch-size"), std::find(line.begin(), line.end(), "--mock-data"));
  const std::vector<std::string> layout = {"--pipeline-model-parallel-size", "2", "--world-size", "4", "--json"};
  const json scheduled =
      json::parse(plan_output(with(with(line, {"--step-batch-size-schedule", "0:8 6400:32"}), layout)));
  const json fixed = json::parse(plan_output(with(with(line, {"--global-batch-size", "32"}), layout)));
  EXPECT_EQ(scheduled.at("num_microbatches"), 8);
  EXPECT_EQ(scheduled.at("global_batch_size"), 32);
  EXPECT_EQ(scheduled.at("step_batch_size_schedule"), "0:8 100:32");  // thresholds in samples
  EXPECT_EQ(scheduled.at("flops_per_iteration"), fixed.at("flops_per_iteration"));
  EXPECT_EQ(scheduled.at("ranks"), fixed.at("ranks"));
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
  const std::vector<PipelineRankMemory> want = plan_memory(training_layout(m, t, 8, {Device::cpu, cpu_backend().max_threads()}));
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

// Two distributed-optimizer instances on dp 4 shard the state over 2 ranks, as one instance on dp 2.
TEST(PlanCommand, OptimizerInstancesShardOverTheRanksOfOne) {
  const std::vector<std::string> distributed = {"--use-distributed-optimizer", "--json"};
  const json two = json::parse(plan_output(with(with(train_line(), distributed),
                                                {"--world-size", "4", "--num-distributed-optimizer-instances", "2"})));
  const json one = json::parse(plan_output(with(with(train_line(), distributed), {"--world-size", "2"})));
  EXPECT_EQ(two.at("distributed_optimizer_instances"), 2);
  EXPECT_EQ(two.at("ranks")[0].at("optimizer_bytes"), one.at("ranks")[0].at("optimizer_bytes"));
  const std::string text = plan_output(with(train_line(), {"--use-distributed-optimizer", "--world-size", "4",
                                                           "--num-distributed-optimizer-instances", "2"}));
  EXPECT_NE(text.find("state sharded over 2 data-parallel ranks (2 instances"), std::string::npos) << text;
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
      {{"--world-size", "4", "--use-distributed-optimizer", "--num-distributed-optimizer-instances", "3"},
       "--num-distributed-optimizer-instances 3 does not divide the data-parallel size 4"},
  };
  for (const Case& c : cases) {
    const std::string message = plan_error(with(train_line(), c.extra));
    EXPECT_NE(message.find(c.expected), std::string::npos) << "got: " << message;
  }
}

// Megatron lays out the expert grid on a dense model too: under the tp-pp-dp mapping its pipeline
// groups must match the dense ones, so --expert-tensor-parallel-size counts (Megatron's own
// gpt3_mcore_te_tp2_pp2_cp2_etp4_dp_last passes etp 4 = tp x cp for that reason).
TEST(PlanCommand, DenseModelsLayOutTheExpertGridAsMegatron) {
  const std::vector<std::string> layout = {"--tensor-model-parallel-size", "2", "--context-parallel-size", "2",
                                           "--pipeline-model-parallel-size", "2", "--use-tp-pp-dp-mapping",
                                           "--world-size", "8", "--global-batch-size", "16"};
  plan_output(with(with(train_line(), layout), {"--expert-tensor-parallel-size", "4"}));
  EXPECT_NE(plan_error(with(train_line(), layout)).find("etp x ep must equal tp x cp"), std::string::npos);
}

// Split "--a 1 --b" into arguments.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// --search lists layouts that fit, fastest first; each one's flags, given back to plan, give the
// same peak memory (the search plans exactly what plan plans).
TEST(PlanCommand, SearchListsLayoutsThatFitFastestFirst) {
  // No layout flags: each listed layout's flags complete the line.
  const std::vector<std::string> base = {"--num-layers", "4",    "--hidden-size", "64",  "--num-attention-heads",
                                         "4",            "--seq-length", "64",   "--global-batch-size", "16",
                                         "--vocab-size", "1000", "--lr",          "1e-3", "--train-iters",
                                         "10",           "--bf16",       "--world-size", "4"};
  const json all = json::parse(
      plan_output(with(base, {"--micro-batch-size", "1", "--search", "--device", "cpu", "--top", "1000", "--json"})));
  ASSERT_GT(all.at("fitting").get<int>(), 10);
  const json& layouts = all.at("layouts");
  ASSERT_EQ(layouts.size(), all.at("fitting").get<size_t>());
  // A budget between the smallest and the largest peak leaves some out.
  int64_t low = INT64_MAX, high = 0;
  for (const json& l : layouts) {
    low = std::min(low, l.at("peak_bytes").get<int64_t>());
    high = std::max(high, l.at("peak_bytes").get<int64_t>());
  }
  const double budget_gib = static_cast<double>(low + high) / 2.0 / (1024.0 * 1024.0 * 1024.0);
  const json some = json::parse(plan_output(with(base, {"--micro-batch-size", "1", "--search", "--device", "cpu", "--top",
                                                        "1000", "--json", "--memory-budget-gb",
                                                        std::to_string(budget_gib)})));
  EXPECT_LT(some.at("fitting").get<int>(), all.at("fitting").get<int>());
  EXPECT_GT(some.at("fitting").get<int>(), 0);
  double previous = 0.0;
  for (const json& l : some.at("layouts")) {
    EXPECT_LE(l.at("peak_bytes").get<double>(), some.at("memory_budget_bytes").get<double>());
    EXPECT_GE(l.at("step_seconds").get<double>(), previous);
    previous = l.at("step_seconds").get<double>();
    EXPECT_NEAR(l.at("step_seconds").get<double>(),
                l.at("compute_seconds").get<double>() + l.at("bubble_seconds").get<double>() +
                    l.at("comm_seconds").get<double>(),
                1e-12);
  }
  for (size_t i = 0; i < layouts.size(); i += 7) {  // a sample of them, back through plan
    const json plan = json::parse(plan_output(with(with(base, words(layouts[i].at("flags"))), {"--json"})));
    int64_t peak = 0;
    for (const json& r : plan.at("ranks")) peak = std::max(peak, r.at("peak_bytes").get<int64_t>());
    EXPECT_EQ(peak, layouts[i].at("peak_bytes").get<int64_t>()) << layouts[i].at("flags");
  }
  EXPECT_NE(plan_error(with(base, {"--micro-batch-size", "1", "--search", "--device", "tpu"}))
                .find("--device must be one of a100|h100|h200|cpu|cuda|auto"),
            std::string::npos);
  std::vector<std::string> no_batch = base;
  no_batch.erase(no_batch.begin() + 8, no_batch.begin() + 10);  // --global-batch-size 16
  const std::string message = plan_error(with(no_batch, {"--micro-batch-size", "1", "--search"}));
  EXPECT_NE(message.find("pass --global-batch-size"), std::string::npos) << message;
}

}  // namespace
}  // namespace mt
