// Owns ProcessGroups: this rank's communicators by role, split from the world communicator along
// ParallelGrid's groups (Megatron's parallel_state.initialize_model_parallel). Only the roles in
// use so far are built (dense and expert); the others follow with the features that need them.
#pragma once

#include <array>
#include <memory>

#include "comm/communicator.h"
#include "parallel/grid.h"

namespace mt {

struct ProcessGroups {
  ParallelGrid grid;
  Communicator* world = nullptr;
  std::unique_ptr<Communicator> tp;              // tensor parallel: the layer collectives
  std::unique_ptr<Communicator> dp;              // data parallel: the samples (each reads its own)
  std::unique_ptr<Communicator> cp;              // context parallel: attention's keys and values
  // dp × cp: the dense gradient reduction, the distributed optimizer's shards and the loss sums
  // (context-parallel ranks hold the same weights and disjoint tokens of the same samples).
  std::unique_ptr<Communicator> dp_cp;
  std::unique_ptr<Communicator> model_parallel;  // tp-pp: the gradient norm, found_inf
  std::unique_ptr<Communicator> pp;              // pipeline: activations and their gradients
  // The first and last pipeline stage (tied embedding gradients); a middle stage's is itself alone.
  std::unique_ptr<Communicator> embedding;
  // The expert layers' groups (the grid's expert rank generator: tp := etp, dp := expert_dp).
  std::unique_ptr<Communicator> ep;         // expert parallel: the alltoall dispatcher's exchange
  std::unique_ptr<Communicator> etp;        // expert tensor parallel: one expert's weight shards
  std::unique_ptr<Communicator> etp_ep;     // etp × ep: the allgather dispatcher's gathers
  std::unique_ptr<Communicator> expert_dp;  // expert data parallel: the expert gradient all-reduce
  std::unique_ptr<Communicator> expert_model_parallel;  // etp × ep × pp: the experts' gradient norm
  // --num-distributed-optimizer-instances N > 1 only (else null): dp_cp and expert-dp each split
  // into N instances of consecutive ranks (Megatron's intra-partial groups), which shard the
  // optimizer, and the groups of the ranks at one position in their instance (inter-partial),
  // which all-reduce each shard's gradients.
  std::unique_ptr<Communicator> dp_intra, dp_inter, expert_dp_intra, expert_dp_inter;

  // The group the distributed optimizer shards over: the instance, or dp_cp itself with one.
  Communicator* dp_shard() const { return dp_intra ? dp_intra.get() : dp_cp.get(); }
  Communicator* expert_dp_shard() const { return expert_dp_intra ? expert_dp_intra.get() : expert_dp.get(); }
};

// Collective over `world`: every rank must call it with the same config (world_size is taken
// from the communicator). optimizer_instances: --num-distributed-optimizer-instances. Throws
// mt::Error naming the flag when the layout does not fit.
ProcessGroups make_process_groups(Communicator& world, GridConfig config, int optimizer_instances = 1);

// Σ over the group of a per-rank scalar (every rank gets the total; null or size 1: the value).
double sum_over(Communicator* group, double value);
// The same for a few scalars at once (one collective).
template <size_t N>
std::array<double, N> sum_over(Communicator* group, std::array<double, N> values) {
  if (group != nullptr && group->size() > 1)
    group->all_reduce(TensorView(values.data(), DType::f64, {static_cast<int64_t>(N)}), ReduceOp::sum);
  return values;
}

}  // namespace mt
