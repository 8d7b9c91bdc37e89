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
  std::unique_ptr<Communicator> dp;              // data parallel
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
};

// Collective over `world`: every rank must call it with the same config (world_size is taken
// from the communicator). Throws mt::Error naming the flag when the layout does not fit.
ProcessGroups make_process_groups(Communicator& world, GridConfig config);

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
