// `megatron plan`: what a `megatron train` command line would reserve on every rank, how much
// it computes and how long its pipeline idles, from the flags alone: no model is built, no
// memory allocated, no MPI started. The memory is the memory tracker's, category by category
// (plan/memory_plan). Under --step-batch-size-schedule everything is planned for its final,
// largest batch (the most micro-batches in flight, the most FLOPs, the smallest bubble).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/device_selection.h"
#include "app/options.h"
#include "app/plan_search.h"
#include "app/tokenizer_flags.h"
#include "app/train_flags.h"
#include "backend/backend.h"
#include "base/error.h"
#include "base/memory.h"
#include "data/tokenizer.h"
#include "plan/comm_volume.h"
#include "plan/flops.h"
#include "plan/memory_plan.h"
#include "train/trainer.h"

namespace mt {

namespace {

std::string chunk_name(const StageRange& r) {
  std::string name = r.num_layers() > 0 ? "layers " + std::to_string(r.first_layer) + ".." +
                                              std::to_string(r.last_layer - 1)
                                        : "no layers";
  if (r.embedding) name += " + embedding";
  if (r.head) name += " + output layer and loss";
  return name;
}

std::string ranks_of_stage(const ParallelGrid& grid, int pp_rank) {
  std::string list;
  int count = 0;
  for (int r = 0; r < grid.world_size(); ++r) {
    if (grid.dense_coords(r).pp != pp_rank) continue;
    if (++count <= 8) list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  return count > 8 ? list + ",... (" + std::to_string(count) + " ranks)" : list;
}

std::string bytes(int64_t n) { return format_bytes(static_cast<size_t>(n)); }

// Bytes a rank of this pipeline stage sends per iteration, by group; the tensor-parallel group's
// all-reduces (tp) apart from its sequence-parallel gathers and scatters (sp).
nlohmann::ordered_json sent_by_group(const StepComm& step) {
  CommTotals tp = step.totals(CommGroup::tp), sp;
  std::swap(sp.all_gather, tp.all_gather);
  std::swap(sp.reduce_scatter, tp.reduce_scatter);
  const int t = step.size(CommGroup::tp);
  return {{"tp", tp.sent_bytes(t)},
          {"sp", sp.sent_bytes(t)},
          {"pp", step.sent_bytes(CommGroup::pp)},
          {"embedding", step.sent_bytes(CommGroup::embedding)},
          {"dp", step.sent_bytes(CommGroup::dp)},
          {"expert-dp", step.sent_bytes(CommGroup::expert_dp)},
          {"cp", step.sent_bytes(CommGroup::cp)}};
}

// Megatron's bubble: idle time over ideal compute time, (p - 1) / (v · m) with forward and
// backward of every virtual stage taking the same time.
double bubble_fraction(int pp, int vp, int microbatches) {
  return static_cast<double>(pp - 1) / (static_cast<double>(vp) * microbatches);
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("plan").c_str(), stdout);
      return 0;
    }
  const Options options = parse_options("plan", args);
  ModelConfig model = model_config(options);
  const TrainConfig train = train_config(options, /*for_plan=*/true);
  // The vocabulary decides the embedding's size: --vocab-size, or the tokenizer's (as train).
  if (!options.has("--vocab-size")) {
    MT_CHECK(has_tokenizer_flags(options)) << "pass --vocab-size, or the tokenizer flags train would read it from";
    model.vocab_size = make_tokenizer(tokenizer_options(options))->vocab_size();
  }
  const int64_t world_size = options.integer("--world-size");
  MT_CHECK(world_size >= 1 && world_size <= 1'000'000) << "--world-size must be between 1 and 1000000, got " << world_size;
  if (options.flag("--search")) return plan_search(options, model, train, static_cast<int>(world_size));
  const TrainingLayout layout =
      training_layout(model, train, static_cast<int>(world_size), planned_target(options));
  const ParallelGrid grid(layout.grid);
  const PipelinePlan pipeline = pipeline_plan(layout);
  const std::vector<PipelineRankMemory> memory = plan_memory(layout, pipeline);
  const std::vector<StepComm> comm = plan_comm(layout, pipeline);
  const int64_t global_batch = layout.micro_batch * layout.num_microbatches * grid.dp();
  const double flops = flops_per_iteration(layout.model, global_batch);
  double rerun = 0.0;  // what recomputation adds, every stage's layers over the whole batch
  for (const ChunkLayers& l : pipeline.partition.stages)
    rerun += recompute_flops(layout.model, {l.first_layer, l.last_layer, l.embedding, l.head}, global_batch);
  const double bubble = bubble_fraction(grid.pp(), pipeline.partition.vp, layout.num_microbatches);

  // The steps in samples; empty without a schedule.
  const std::string schedule = train.step_batch_size_schedule ? train.step_batch_size_schedule->describe() : "";

  if (options.flag("--json")) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (int r = 0; r < grid.world_size(); ++r) {
      const DenseCoords at = grid.dense_coords(r);
      const RankMemory& m = memory[static_cast<size_t>(at.pp)].total;
      ranks.push_back({{"rank", r},
                       {"tp_rank", at.tp},
                       {"pp_rank", at.pp},
                       {"cp_rank", at.cp},
                       {"dp_rank", at.dp},
                       {"weights_bytes", m.weights},
                       {"grads_bytes", m.grads},
                       {"optimizer_bytes", m.optimizer},
                       {"activations_bytes", m.activations},
                       {"workspace_bytes", m.workspace},
                       {"comm_bytes", m.comm},
                       {"peak_bytes", m.peak()},
                       {"sent_bytes_per_iteration", sent_by_group(comm[static_cast<size_t>(at.pp)])}});
    }
    const nlohmann::ordered_json plan = {{"world_size", grid.world_size()},
                                 {"tensor_model_parallel_size", grid.tp()},
                                 {"pipeline_model_parallel_size", grid.pp()},
                                 {"context_parallel_size", grid.cp()},
                                 {"virtual_pipeline_model_parallel_size", pipeline.partition.vp},
                                 {"data_parallel_size", grid.dp()},
                                 {"distributed_optimizer_instances", layout.ddp.num_distributed_optimizer_instances},
                                 {"micro_batch_size", layout.micro_batch},
                                 {"num_microbatches", layout.num_microbatches},
                                 {"global_batch_size", global_batch},
                                 {"step_batch_size_schedule", schedule},
                                 {"flops_per_iteration", flops},
                                 {"recompute_flops_per_iteration", rerun},
                                 {"pipeline_bubble_fraction", bubble},
                                 {"ranks", ranks}};
    std::puts(plan.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s\n", layout.model.summary().c_str());
  const std::string context =
      grid.cp() > 1 ? " x context parallel " + std::to_string(grid.cp()) + " (" +
                          cp_comm_type_name(layout.model.cp_comm_type) + ")"
                    : "";
  std::printf("layout: %d ranks = tensor parallel %d%s%s x pipeline parallel %d%s x data parallel %d; %d micro-batches "
              "of %lld per iteration and data-parallel rank (global batch %lld)\n",
              grid.world_size(), grid.tp(), layout.model.sequence_parallel && grid.tp() > 1 ? " (sequence parallel)" : "",
              context.c_str(), grid.pp(), pipeline.partition.vp > 1 ? (" (" + std::to_string(pipeline.partition.vp) + " chunks per rank)").c_str() : "",
              grid.dp(), layout.num_microbatches, static_cast<long long>(layout.micro_batch),
              static_cast<long long>(global_batch));
  if (!schedule.empty())
    std::printf("planned for the final, largest batch of --step-batch-size-schedule (in samples: %s)\n",
                schedule.c_str());
  if (layout.ddp.use_distributed_optimizer)
    std::printf("distributed optimizer: state sharded over %d data-parallel rank%s (%d instance%s of it; with several, "
                "each shard's gradients are all-reduced across them)\n",
                layout.ddp.shard_size(), layout.ddp.shard_size() == 1 ? "" : "s",
                layout.ddp.num_distributed_optimizer_instances,
                layout.ddp.num_distributed_optimizer_instances == 1 ? "" : "s");
  std::printf("memory per rank (bytes the memory tracker counts; the same on every rank of a pipeline stage):\n");
  for (const PipelineRankMemory& stage : memory) {
    const RankMemory& m = stage.total;
    std::printf("  pipeline rank %d (ranks %s): peak %s = weights %s | grads %s | optimizer %s | activations %s | "
                "workspace %s | comm %s\n",
                stage.pp_rank, ranks_of_stage(grid, stage.pp_rank).c_str(), bytes(m.peak()).c_str(),
                bytes(m.weights).c_str(), bytes(m.grads).c_str(), bytes(m.optimizer).c_str(), bytes(m.activations).c_str(),
                bytes(m.workspace).c_str(), bytes(m.comm).c_str());
    for (const ChunkMemory& c : stage.chunks)
      std::printf("    %s: activations %s (%d micro-batch%s in flight), workspace %s\n", chunk_name(c.range).c_str(),
                  bytes(c.activations).c_str(), c.slots, c.slots == 1 ? "" : "es", bytes(c.workspace).c_str());
  }
  std::printf("communication per iteration (bytes each rank sends, ring algorithms; tp: all-reduces, sp: the\n"
              "sequence-parallel all-gathers and reduce-scatters over the same group; dp: over data x context\n"
              "parallel ranks; cp: attention's keys and values):\n");
  for (const StepComm& step : comm) {
    std::printf("  pipeline rank %d:", step.pp_rank);
    const char* separator = " ";
    const nlohmann::ordered_json sent_bytes = sent_by_group(step);
    for (const auto& [group, sent] : sent_bytes.items()) {
      std::printf("%s%s %s", separator, group.c_str(), bytes(static_cast<int64_t>(sent.get<double>())).c_str());
      separator = " | ";
    }
    std::printf("\n");
  }
  std::printf("FLOPs per iteration: %.4g (Megatron's formula), %.4g per rank; recomputation reruns %.4g more\n", flops,
              flops / grid.world_size(), rerun);
  std::printf("pipeline bubble: %.4f of the ideal time ((p - 1) / (v m) = %d / (%d x %d))\n", bubble, grid.pp() - 1,
              pipeline.partition.vp, layout.num_microbatches);
  return 0;
}

}  // namespace mt
