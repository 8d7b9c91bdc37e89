// Owns a training run's memory per rank from its configuration alone: what each pipeline rank's
// model chunks, optimizer and communication buffers reserve, as the Trainer lays them out (its
// stages' slots from the pipeline schedule, its receive buffers, the distributed optimizer's
// shards), without building a model, allocating a byte or starting MPI. The ranks of one pipeline
// stage differ only in their tensor- and data-parallel coordinates, which shard evenly, so the
// plan is per pipeline rank.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/muon_matrices.h"
#include "model/param_layout.h"
#include "parallel/grid.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"
#include "plan/model_state.h"

namespace mt {

// What fixes every rank's memory and communication: the model and the training flags that lay it out.
struct TrainingLayout {
  ModelConfig model;  // finalized (its tensor-parallel size, recomputation, dtype)
  GridConfig grid;
  PartitionConfig pipeline;  // its pp and num_layers match grid and model
  int64_t micro_batch = 1;
  // Micro-batches per iteration and data-parallel rank: the largest count of a
  // --step-batch-size-schedule (what memory, FLOPs and communication are planned for), and the
  // smaller counts its earlier steps run (each gets its own training schedule).
  int num_microbatches = 1;
  std::vector<int> earlier_microbatches;
  int eval_microbatches = 0;      // per evaluation iteration (--eval-global-batch-size); 0 = num_microbatches
  int microbatch_group_size = 0;  // interleaving's; 0 = pp
  DdpConfig ddp;                  // data_parallel_size: the grid's
  WorkspaceTarget target;         // what the attention workspace is sized for
  // --calculate-per-token-loss: no memory, but one more all-reduce (plan/comm_volume.h).
  bool per_token_loss = false;
  // --log-params-norm: the parameters' norm is reduced as the gradient norm is, once more a step.
  bool params_norm = false;
  // --optimizer muon: its matrices' geometry (their state and the step's scratch).
  std::optional<MuonGeometry> muon;
};

// The pipeline a layout runs: its split into model chunks and its schedules (training, one per
// micro-batch count, and the forward-only one of evaluation), each checked by the simulator.
struct PipelinePlan {
  PipelinePartition partition;
  std::map<int, Schedule> train_by_microbatches;
  Schedule eval;

  // The training schedule of `num_microbatches` (throws for a count the layout does not run).
  const Schedule& train(int num_microbatches) const;
  // That of the layout's largest count.
  const Schedule& largest_train() const { return train_by_microbatches.rbegin()->second; }
  // Per model chunk of pipeline rank `pp_rank`, the micro-batches in flight at once under any of
  // the training schedules: its stage's activation slots.
  std::vector<int> slots(int pp_rank) const;
  // The f32 hidden-state messages pipeline rank `pp_rank` holds before the computes that consume
  // them (either schedule): its receive buffers.
  int receive_buffers(int pp_rank) const;
};
PipelinePlan pipeline_plan(const TrainingLayout& layout);

// One model chunk of a pipeline rank.
struct ChunkMemory {
  StageRange range;
  int slots = 0;  // micro-batches in flight (the schedule's most)
  ModelStateBytes state;
  int64_t activations = 0;  // by formula (plan/activation_memory)
  int64_t workspace = 0;    // as the stage carves it (model/stage_buffers)
};

// Bytes by the memory tracker's categories.
struct RankMemory {
  int64_t weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, comm = 0;
  // Every buffer is reserved up front and kept to the end: the peak is their sum.
  int64_t peak() const { return weights + grads + optimizer + activations + workspace + comm; }
};

struct PipelineRankMemory {
  int pp_rank = 0;
  std::vector<ChunkMemory> chunks;
  int receive_buffers = 0;  // f32 hidden-state messages waiting for their compute
  RankMemory total;
};

// One entry per pipeline rank. Throws mt::Error for layouts the Trainer would refuse (a split
// that does not divide, a schedule that does not fit).
std::vector<PipelineRankMemory> plan_memory(const TrainingLayout& layout);
// The same with the layout's pipeline given (pipeline_plan(layout)).
std::vector<PipelineRankMemory> plan_memory(const TrainingLayout& layout, const PipelinePlan& pipeline);

}  // namespace mt
