#include "plan/memory_plan.h"

#include <algorithm>

#include "model/stage_buffers.h"
#include "pipeline/simulate.h"
#include "plan/activation_memory.h"

namespace mt {

std::vector<int> PipelinePlan::slots(int pp_rank) const {
  return max_in_flight(train.ranks.at(static_cast<size_t>(pp_rank)), partition.vp);
}

int PipelinePlan::receive_buffers(int pp_rank) const {
  const auto r = static_cast<size_t>(pp_rank);
  return std::max(max_buffered_receives(train.ranks.at(r), partition.pp),
                  max_buffered_receives(eval.ranks.at(r), partition.pp));
}

PipelinePlan pipeline_plan(const TrainingLayout& layout) {
  PipelinePlan plan;
  plan.partition = partition_layers(layout.pipeline);
  ScheduleConfig config{plan.partition.pp, plan.partition.vp, layout.num_microbatches, layout.microbatch_group_size,
                        false};
  plan.train = build_schedule(config);
  check_schedule(plan.train);
  config.forward_only = true;
  plan.eval = build_schedule(config);
  check_schedule(plan.eval);
  return plan;
}

std::vector<PipelineRankMemory> plan_memory(const TrainingLayout& layout) {
  return plan_memory(layout, pipeline_plan(layout));
}

std::vector<PipelineRankMemory> plan_memory(const TrainingLayout& layout, const PipelinePlan& pipeline) {
  const ModelConfig& c = layout.model;
  const PipelinePartition& partition = pipeline.partition;
  const int64_t sp = c.sequence_parallel ? c.tensor_model_parallel_size : 1;
  const int64_t message = 4 * c.seq_length / sp * layout.micro_batch * c.hidden_size;  // f32 [Nl, h]
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
      m.state = model_state_bytes(c, m.range, layout.ddp);
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
    rank.receive_buffers = pipeline.receive_buffers(pp_rank);
    t.comm += rank.receive_buffers * message;
    ranks.push_back(rank);
  }
  return ranks;
}

}  // namespace mt
