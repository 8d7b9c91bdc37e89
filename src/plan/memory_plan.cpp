#include "plan/memory_plan.h"

#include <algorithm>

#include "base/error.h"
#include "model/stage_buffers.h"
#include "pipeline/simulate.h"
#include "plan/activation_memory.h"

namespace mt {

const Schedule& PipelinePlan::train(int num_microbatches) const {
  const auto at = train_by_microbatches.find(num_microbatches);
  MT_CHECK(at != train_by_microbatches.end()) << "no training schedule planned for " << num_microbatches << " micro-batches";
  return at->second;
}

std::vector<int> PipelinePlan::slots(int pp_rank) const {
  std::vector<int> most(static_cast<size_t>(partition.vp), 0);
  for (const auto& [m, schedule] : train_by_microbatches) {
    const std::vector<int> in_flight = max_in_flight(schedule.ranks.at(static_cast<size_t>(pp_rank)), partition.vp);
    for (size_t c = 0; c < most.size(); ++c) most[c] = std::max(most[c], in_flight[c]);
  }
  return most;
}

int PipelinePlan::receive_buffers(int pp_rank) const {
  const auto r = static_cast<size_t>(pp_rank);
  int most = max_buffered_receives(eval.ranks.at(r), partition.pp);
  for (const auto& [m, schedule] : train_by_microbatches)
    most = std::max(most, max_buffered_receives(schedule.ranks.at(r), partition.pp));
  return most;
}

PipelinePlan pipeline_plan(const TrainingLayout& layout) {
  PipelinePlan plan;
  plan.partition = partition_layers(layout.pipeline);
  const auto built = [&](int m, bool forward_only) {
    const ScheduleConfig config{plan.partition.pp, plan.partition.vp, m, layout.microbatch_group_size, forward_only};
    try {
      Schedule schedule = build_schedule(config);
      check_schedule(schedule);
      return schedule;
    } catch (const Error& e) {
      // A step of a batch schedule or a separate evaluation batch: say which count broke it.
      if (forward_only ? m == layout.num_microbatches : layout.earlier_microbatches.empty()) throw;
      MT_FAIL() << (forward_only ? "evaluation (--eval-global-batch-size)" : "a --step-batch-size-schedule step")
                << " with " << m << " micro-batches per data-parallel rank: " << e.what();
    }
  };
  for (const int m : layout.earlier_microbatches) plan.train_by_microbatches.emplace(m, built(m, false));
  plan.train_by_microbatches.emplace(layout.num_microbatches, built(layout.num_microbatches, false));
  plan.eval = built(layout.eval_microbatches > 0 ? layout.eval_microbatches : layout.num_microbatches, true);
  return plan;
}

std::vector<PipelineRankMemory> plan_memory(const TrainingLayout& layout) {
  return plan_memory(layout, pipeline_plan(layout));
}

std::vector<PipelineRankMemory> plan_memory(const TrainingLayout& layout, const PipelinePlan& pipeline) {
  const ModelConfig& c = layout.model;
  const PipelinePartition& partition = pipeline.partition;
  const int64_t sp = c.sequence_parallel ? c.tensor_model_parallel_size : 1;
  const int64_t message = 4 * c.local_seq_length() / sp * layout.micro_batch * c.hidden_size;  // f32 [Nl, h]
  std::vector<PipelineRankMemory> ranks;
  for (int pp_rank = 0; pp_rank < partition.pp; ++pp_rank) {
    const std::vector<int> slots = pipeline.slots(pp_rank);
    PipelineRankMemory rank;
    rank.pp_rank = pp_rank;
    RankMemory& t = rank.total;
    for (int chunk = 0; chunk < partition.vp; ++chunk) {
      const ChunkLayers& layers = partition.chunk(pp_rank, chunk);
      ChunkMemory m;
      m.range = {layers.first_layer, layers.last_layer, layers.embedding, layers.head};
      m.slots = slots[static_cast<size_t>(chunk)];
      m.state = model_state_bytes(c, m.range, layout.ddp, layout.muon ? &*layout.muon : nullptr);
      m.activations = stage_activation_formula(c, layout.micro_batch, m.range, m.slots);
      m.workspace = static_cast<int64_t>(
          measure_stage_buffers({c, m.range, layout.micro_batch, m.slots, layout.target}).workspace);
      t.weights += m.state.weights;
      t.grads += m.state.grads;
      t.optimizer += m.state.optimizer;
      t.activations += m.activations;
      t.workspace += m.workspace;
      t.comm += m.state.reduce_scatter;
      rank.chunks.push_back(m);
    }
    if (layout.muon) {
      std::vector<ModelStateBytes> states;
      for (const ChunkMemory& m : rank.chunks) states.push_back(m.state);
      t.optimizer += muon_scratch_bytes(states);
    }
    rank.receive_buffers = pipeline.receive_buffers(pp_rank);
    t.comm += rank.receive_buffers * message;
    ranks.push_back(rank);
  }
  return ranks;
}

}  // namespace mt
