// `megatron plan`: what a `megatron train` command line would reserve on every rank, how much
// it computes and how long its pipeline idles, from the flags alone: no model is built, no
// memory allocated, no MPI started. The memory is the memory tracker's, category by category
// (plan/memory_plan).
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/options.h"
#include "app/tokenizer_flags.h"
#include "app/train_flags.h"
#include "backend/backend.h"
#include "base/error.h"
#include "base/memory.h"
#include "data/tokenizer.h"
#include "plan/comm_volume.h"
#include "plan/flops.h"
#include "plan/layout_search.h"
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

// --search: every layout of the world that fits the budget, fastest first by the device model.
int search(const Options& options, const ModelConfig& model, const TrainConfig& train, int world_size) {
  MT_CHECK(options.given("--global-batch-size"))
      << "--search keeps the global batch and varies everything else: pass --global-batch-size";
  const DeviceModel device = device_model(options.text("--device"));
  const double budget = options.has("--memory-budget-gb") ? options.real("--memory-budget-gb") * 1024.0 * 1024.0 * 1024.0
                                                           : device.memory_bytes;
  MT_CHECK(budget > 0) << "--memory-budget-gb must be positive";
  const int64_t top = options.integer("--top");
  MT_CHECK(top >= 1) << "--top must be at least 1, got " << top;
  // Layouts that share a pipeline (p, v, m, group size) share its schedules.
  std::map<std::tuple<int, int, int, int>, PipelinePlan> pipelines;
  std::vector<LayoutEstimate> fits;
  int planned = 0, refused = 0, too_big = 0;
  const std::vector<LayoutChoice> choices =
      layout_choices(model, train.global_batch_size, world_size, device.devices_per_node);
  for (const LayoutChoice& choice : choices) {
    // Selective recomputation is the flash path here: with it as the attention backend already,
    // the layout without recomputation is the same one.
    if (choice.recompute == RecomputeGranularity::selective && model.attention_impl == AttentionImpl::flash) continue;
    ++planned;
    ModelConfig m = model;
    m.tensor_model_parallel_size = choice.tp;
    m.sequence_parallel = choice.sp;
    m.recompute_granularity = choice.recompute;
    m.recompute_method = RecomputeMethod::uniform;
    m.recompute_num_layers = 1;
    m.recompute_core_attn = true;
    m.recompute_mlp = false;
    if (choice.recompute == RecomputeGranularity::selective) m.attention_impl = AttentionImpl::flash;
    TrainConfig t = train;
    t.pipeline = PartitionConfig{};
    t.pipeline.pp = choice.pp;
    if (choice.vp > 1) t.pipeline.virtual_stages_per_rank = choice.vp;
    t.micro_batch_size = choice.micro_batch;
    t.use_distributed_optimizer = choice.distributed_optimizer;
    t.overlap_param_gather = t.overlap_param_gather && choice.distributed_optimizer;
    try {
      const TrainingLayout layout = training_layout(m, t, world_size, cpu_backend().max_threads());
      const auto key = std::make_tuple(choice.pp, choice.vp, layout.num_microbatches, layout.microbatch_group_size);
      auto at = pipelines.find(key);
      if (at == pipelines.end()) at = pipelines.emplace(key, pipeline_plan(layout)).first;
      const LayoutEstimate e = estimate_layout(layout, at->second, choice, device);
      if (static_cast<double>(e.peak_bytes) > budget) {
        ++too_big;
        continue;
      }
      fits.push_back(e);
    } catch (const Error&) {  // a layout the trainer refuses (its message is not the user's concern here)
      ++refused;
    }
  }
  std::stable_sort(fits.begin(), fits.end(), [](const LayoutEstimate& a, const LayoutEstimate& b) {
    return a.step_s() != b.step_s() ? a.step_s() < b.step_s() : a.peak_bytes < b.peak_bytes;
  });
  const size_t fitting = fits.size();
  if (fits.size() > static_cast<size_t>(top)) fits.resize(static_cast<size_t>(top));
  if (options.flag("--json")) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const LayoutEstimate& e : fits)
      list.push_back({{"flags", e.choice.flags()},
                      {"peak_bytes", e.peak_bytes},
                      {"step_seconds", e.step_s()},
                      {"compute_seconds", e.compute_s},
                      {"bubble_seconds", e.bubble_s},
                      {"comm_seconds", e.comm_s}});
    const nlohmann::ordered_json out = {{"device", device.name},
                                        {"memory_budget_bytes", budget},
                                        {"layouts_planned", planned},
                                        {"fitting", fitting},
                                        {"refused", refused},
                                        {"over_budget", too_big},
                                        {"layouts", list}};
    std::puts(out.dump(2).c_str());
    return 0;
  }
  ModelConfig finalized = model;
  finalized.finalize();
  std::printf("model: %s\n", finalized.summary().c_str());
  std::printf("search: %d layouts of %d ranks planned: %zu fit %s per device (the best %zu below), %d do not, %d are "
              "refused by the trainer's rules\n"
              "device model %s: %.0f TFLOP/s peak at %.0f%%, %.0f GB/s within a node of %d, %.0f GB/s between nodes\n",
              planned, world_size, fitting, format_bytes(static_cast<size_t>(budget)).c_str(), fits.size(), too_big,
              refused, device.name.c_str(), device.peak_flops / 1e12, 100.0 * device.achievable,
              device.link_bytes_per_s / 1e9, device.devices_per_node, device.network_bytes_per_s / 1e9);
  if (fits.empty()) {
    std::printf("no layout fits: raise --world-size or --memory-budget-gb, or shrink the model\n");
    return 0;
  }
  std::printf("%9s | %9s | %9s | %9s | %11s | %s\n", "step (s)", "compute", "bubble", "comm", "peak memory", "flags");
  for (const LayoutEstimate& e : fits)
    std::printf("%9.3f | %9.3f | %9.3f | %9.3f | %11s | %s\n", e.step_s(), e.compute_s, e.bubble_s, e.comm_s,
                format_bytes(static_cast<size_t>(e.peak_bytes)).c_str(), e.choice.flags().c_str());
  return 0;
}

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
          {"dp", step.sent_bytes(CommGroup::dp)}};
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
  const TrainConfig train = train_config(options);
  // The vocabulary decides the embedding's size: --vocab-size, or the tokenizer's (as train).
  if (!options.has("--vocab-size")) {
    MT_CHECK(has_tokenizer_flags(options)) << "pass --vocab-size, or the tokenizer flags train would read it from";
    model.vocab_size = make_tokenizer(tokenizer_options(options))->vocab_size();
  }
  const int64_t world_size = options.integer("--world-size");
  MT_CHECK(world_size >= 1 && world_size <= 1'000'000) << "--world-size must be between 1 and 1000000, got " << world_size;
  if (options.flag("--search")) return search(options, model, train, static_cast<int>(world_size));
  const TrainingLayout layout =
      training_layout(model, train, static_cast<int>(world_size), cpu_backend().max_threads());
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

  if (options.flag("--json")) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (int r = 0; r < grid.world_size(); ++r) {
      const DenseCoords at = grid.dense_coords(r);
      const RankMemory& m = memory[static_cast<size_t>(at.pp)].total;
      ranks.push_back({{"rank", r},
                       {"tp_rank", at.tp},
                       {"pp_rank", at.pp},
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
                                 {"virtual_pipeline_model_parallel_size", pipeline.partition.vp},
                                 {"data_parallel_size", grid.dp()},
                                 {"micro_batch_size", layout.micro_batch},
                                 {"num_microbatches", layout.num_microbatches},
                                 {"global_batch_size", global_batch},
                                 {"flops_per_iteration", flops},
                                 {"recompute_flops_per_iteration", rerun},
                                 {"pipeline_bubble_fraction", bubble},
                                 {"ranks", ranks}};
    std::puts(plan.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s\n", layout.model.summary().c_str());
  std::printf("layout: %d ranks = tensor parallel %d%s x pipeline parallel %d%s x data parallel %d; %d micro-batches "
              "of %lld per iteration and data-parallel rank (global batch %lld)\n",
              grid.world_size(), grid.tp(), layout.model.sequence_parallel && grid.tp() > 1 ? " (sequence parallel)" : "",
              grid.pp(), pipeline.partition.vp > 1 ? (" (" + std::to_string(pipeline.partition.vp) + " chunks per rank)").c_str() : "",
              grid.dp(), layout.num_microbatches, static_cast<long long>(layout.micro_batch),
              static_cast<long long>(global_batch));
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
              "sequence-parallel all-gathers and reduce-scatters over the same group):\n");
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
