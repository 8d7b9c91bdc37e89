// Owns the communication of one training iteration from the configuration alone: per pipeline
// rank, the calls and bytes of every collective and message the Trainer's train_step makes over
// each of the groups it counts (tensor-parallel, pipeline, the tied embedding's, data-parallel),
// term by term, derived from the shapes, dtypes, DDP buckets and the same pipeline schedule the
// Trainer runs, without building a model or starting MPI. The ranks of one pipeline stage differ
// only in their tensor- and data-parallel coordinates, which split every tensor evenly, so they
// move the same bytes and the plan is per pipeline rank.
//
// Exact, not estimated: tests/parallel/test_plan_layouts.cpp compares it with the Trainer's counting
// communicators call for call and byte for byte. The one data-dependent part is the distributed
// optimizer's parameter all-gather, which a step skipped for a loss-scaling overflow (--fp16)
// leaves out; the plan assumes the update happens.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "comm/counting_communicator.h"
#include "plan/memory_plan.h"

namespace mt {

// The groups the Trainer counts (IterationStats' bytes): tp, the pipeline's point-to-point
// messages and loss sums, the tied embedding's (first and last pipeline stage), dp (the gradients,
// the optimizer's shards and the loss sums over dp × cp ranks; the token count over dp alone), an
// MoE model's expert-dp (its experts' gradients), and cp (context parallelism's attention).
enum class CommGroup { tp, pp, embedding, dp, expert_dp, cp };
inline constexpr std::array<CommGroup, 6> kCommGroups = {CommGroup::tp, CommGroup::pp, CommGroup::embedding,
                                                         CommGroup::dp, CommGroup::expert_dp, CommGroup::cp};
const char* comm_group_name(CommGroup group);

// One source of traffic, for the report: its group, what it moves, its calls and bytes (of every
// kind, as CountingCommunicator counts them) over the whole iteration.
struct CommTerm {
  CommGroup group = CommGroup::tp;
  std::string what;  // e.g. "layer forward", "gradient buckets"
  CommTotals totals;
  // The ranks of the communicator it runs over: the group's, but for a role's sub-groups (the
  // distributed-optimizer instances' reductions are dp's and expert-dp's traffic).
  int ranks = 0;
};

struct StepComm {
  int pp_rank = 0;
  std::array<int, 6> group_sizes{1, 1, 1, 1, 1, 1};  // ranks per group, by CommGroup
  std::vector<CommTerm> terms;                 // in the order the step first makes them

  int size(CommGroup group) const { return group_sizes[static_cast<size_t>(group)]; }
  // Σ of the group's terms: what its counting communicator records in one train_step.
  CommTotals totals(CommGroup group) const;
  // Bytes this rank puts on the wire over the group (CommTotals::sent_bytes: ring algorithms, each
  // term over its communicator's ranks).
  double sent_bytes(CommGroup group) const;
};

// One entry per pipeline rank: its traffic in one train_step (forward_backward over
// num_microbatches micro-batches through the training schedule, gradient sync, optimizer step,
// parameter gather). Throws mt::Error for layouts the Trainer would refuse.
std::vector<StepComm> plan_comm(const TrainingLayout& layout);
// The same with the layout's pipeline given (pipeline_plan(layout)).
std::vector<StepComm> plan_comm(const TrainingLayout& layout, const PipelinePlan& pipeline);

}  // namespace mt
