#include "parallel/process_groups.h"

#include <vector>

namespace mt {

namespace {

// The communicator of `role` containing this rank: ranks of one group share a color (the
// group's index) and are ordered by their position in it.
std::unique_ptr<Communicator> split_by_role(Communicator& world, const ParallelGrid& grid, GridRole role) {
  const int rank = world.rank();
  const std::vector<std::vector<int>> groups = grid.all_groups(role);
  for (size_t color = 0; color < groups.size(); ++color)
    for (int member : groups[color])
      if (member == rank) return world.split(static_cast<int>(color), grid.rank_in_group(role, rank));
  // Only the embedding group leaves ranks out (the middle pipeline stages): each is alone.
  MT_CHECK(role == GridRole::embedding) << "rank " << rank << " is in no " << grid_role_name(role) << " group";
  return world.split(static_cast<int>(groups.size()) + rank, 0);
}

// Megatron's intra- and inter-partial groups of a data-parallel group: `instances` blocks of
// consecutive ranks, and the ranks at one position across the blocks.
void split_instances(Communicator& dp, int instances, std::unique_ptr<Communicator>& intra,
                     std::unique_ptr<Communicator>& inter) {
  if (instances == 1) return;
  MT_CHECK(instances > 0 && dp.size() % instances == 0)
      << "--num-distributed-optimizer-instances " << instances << " does not divide the data-parallel size "
      << dp.size() << " (data x context parallel, or the expert-data-parallel size); choose a divisor of both";
  const int per_instance = dp.size() / instances;
  intra = dp.split(dp.rank() / per_instance, dp.rank());
  inter = dp.split(dp.rank() % per_instance, dp.rank());
}

}  // namespace

ProcessGroups make_process_groups(Communicator& world, GridConfig config, int optimizer_instances) {
  config.world_size = world.size();
  ProcessGroups g{.grid = ParallelGrid(config), .world = &world};
  g.tp = split_by_role(world, g.grid, GridRole::tp);
  g.dp = split_by_role(world, g.grid, GridRole::dp);
  g.cp = split_by_role(world, g.grid, GridRole::cp);
  g.dp_cp = split_by_role(world, g.grid, GridRole::dp_cp);
  g.model_parallel = split_by_role(world, g.grid, GridRole::model_parallel);
  g.pp = split_by_role(world, g.grid, GridRole::pp);
  g.embedding = split_by_role(world, g.grid, GridRole::embedding);
  g.ep = split_by_role(world, g.grid, GridRole::ep);
  g.etp = split_by_role(world, g.grid, GridRole::etp);
  g.etp_ep = split_by_role(world, g.grid, GridRole::etp_ep);
  g.expert_dp = split_by_role(world, g.grid, GridRole::expert_dp);
  g.expert_model_parallel = split_by_role(world, g.grid, GridRole::etp_ep_pp);
  split_instances(*g.dp_cp, optimizer_instances, g.dp_intra, g.dp_inter);
  split_instances(*g.expert_dp, optimizer_instances, g.expert_dp_intra, g.expert_dp_inter);
  return g;
}

double sum_over(Communicator* group, double value) {
  if (group != nullptr && group->size() > 1) group->all_reduce(TensorView(&value, DType::f64, {1}), ReduceOp::sum);
  return value;
}

}  // namespace mt
