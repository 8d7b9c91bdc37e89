// Owns `megatron plan --search`: the parallel layouts a model could train with on a world of
// devices (tensor, sequence, pipeline and virtual-pipeline parallelism, the data-parallel rest,
// the micro-batch size, recomputation, the distributed optimizer), and an estimate of each one's
// step time from its FLOPs, its pipeline bubble and its communication over the device model's
// links. The memory and the communication are the plan's own (exact for what this code
// reserves and sends); the time is a model, good for ranking layouts, not a promise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/memory_plan.h"

namespace mt {

// What the estimate assumes of a device and its links. Bandwidths are per device and direction.
struct DeviceModel {
  std::string name;
  double peak_flops = 0.0;           // dense, in the training dtype
  double achievable = 0.5;           // the share of peak a step's GEMMs sustain
  double link_bytes_per_s = 0.0;     // within a node (NVLink; shared memory on CPU)
  double network_bytes_per_s = 0.0;  // between nodes
  int devices_per_node = 8;
  double memory_bytes = 0.0;  // the default budget
};
// a100, h100, h200 (SXM, with NVLink and one 200/400 Gb/s NIC per GPU) or cpu (a rank per core of
// a machine like the one this project is tested on). Throws mt::Error naming the choices.
DeviceModel device_model(const std::string& name);

// One point of the search space (what the train flags would say).
struct LayoutChoice {
  int tp = 1;
  bool sp = false;
  int pp = 1, vp = 1;
  int cp = 1;  // --context-parallel-size (p2p)
  int64_t micro_batch = 1;
  RecomputeGranularity recompute = RecomputeGranularity::none;
  bool distributed_optimizer = false;
  // The train flags that select it.
  std::string flags() const;
};

// Every choice worth planning for `world_size` devices: tp up to a node's devices dividing the
// heads and the query groups, pp dividing the layers evenly, v up to 8 dividing them further,
// context parallelism (p2p) over 1, 2, 4, ... ranks whose 2·cp chunks divide the sequence,
// micro-batches of 1 to 16 dividing the data-parallel share of the global batch, SP whenever tp
// > 1, the three recompute granularities (full: every layer), the distributed optimizer whenever
// dp × cp > 1. The layouts the trainer would refuse are weeded out by building them.
std::vector<LayoutChoice> layout_choices(const ModelConfig& model, int64_t global_batch, int world_size,
                                         int devices_per_node);

struct LayoutEstimate {
  LayoutChoice choice;
  int64_t peak_bytes = 0;  // the largest of the ranks' peaks (plan_memory)
  double compute_s = 0.0, bubble_s = 0.0, comm_s = 0.0;
  double step_s() const { return compute_s + bubble_s + comm_s; }
};

// The step-time model of one layout (its pipeline: pipeline_plan(layout), which callers may share
// between layouts that differ only in what it does not depend on):
//   compute = the busiest pipeline rank's FLOPs (its layers' share of Megatron's formula, the
//             output layer's on the last, and what recomputation reruns) / (peak · achievable)
//   bubble  = compute · (p − 1) / (v · m)
//   comm    = the busiest rank's tensor-parallel bytes / their link (never overlapped), plus its
//             pipeline messages / their link, plus its data-parallel bytes / their link, less the
//             backward they overlap under --overlap-grad-reduce. A group uses the node's link
//             while its ranks share a node (Megatron's order: tp fastest, then dp, then pp),
//             otherwise the network.
LayoutEstimate estimate_layout(const TrainingLayout& layout, const PipelinePlan& pipeline, const LayoutChoice& choice,
                               const DeviceModel& device);

}  // namespace mt
