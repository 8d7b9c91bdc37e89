// `megatron plan --search`: the layouts of the world that fit the memory budget, fastest first by
// the device model (plan/layout_search), as text or JSON.
#include "app/plan_search.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/device_selection.h"
#include "backend/backend.h"
#include "base/error.h"
#include "base/memory.h"
#include "plan/layout_search.h"
#include "train/trainer.h"

namespace mt {

int plan_search(const Options& options, const ModelConfig& model, const TrainConfig& train, int world_size) {
  MT_CHECK(options.given("--global-batch-size"))
      << "--search keeps the global batch and varies everything else: pass --global-batch-size";
  MT_CHECK(!train.step_batch_size_schedule)
      << "--search plans one global batch: pass --global-batch-size (e.g. the schedule's final batch) without "
         "--step-batch-size-schedule";
  const DeviceModel device = device_model(planned_device_model(options));
  const double budget = options.has("--memory-budget-gb") ? options.real("--memory-budget-gb") * 1024.0 * 1024.0 * 1024.0
                                                           : device.memory_bytes;
  MT_CHECK(budget > 0) << "--memory-budget-gb must be positive";
  const int64_t top = options.integer("--top");
  MT_CHECK(top >= 1) << "--top must be at least 1, got " << top;
  // Layouts that share a pipeline (p, v, m, group size, evaluation's m) share its schedules.
  std::map<std::tuple<int, int, int, int, int>, PipelinePlan> pipelines;
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
    m.context_parallel_size = choice.cp;
    m.cp_comm_type = CpCommType::p2p;
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
    if (!choice.distributed_optimizer) t.num_distributed_optimizer_instances = 1;
    try {
      const TrainingLayout layout = training_layout(m, t, world_size, planned_target(options));
      const auto key = std::make_tuple(choice.pp, choice.vp, layout.num_microbatches, layout.microbatch_group_size,
                                       layout.eval_microbatches);
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

}  // namespace mt
