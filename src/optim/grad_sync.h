// Owns data-parallel synchronisation around the optimizer step (Megatron's finalize_model_grads,
// its DDP bucket reductions and the distributed optimizer's parameter all-gather): the
// partial gradients of parameters every tp rank holds whole (Param::partial_over_tp) over the
// tensor-parallel group, then the gradient buffer over the data-parallel group (dp × cp) bucket by bucket, all-reduced, or under the distributed optimizer
// reduce-scattered so each rank holds the sum of its shard only; after the step, the updated
// shards all-gathered back into every rank's parameters (in place: each rank's shard already sits
// at its place in the buffer). With --overlap-grad-reduce a bucket's reduction starts
// (non-blocking) as soon as the last micro-batch's backward has finished all of its parameters,
// and is waited for before the optimizer; with --overlap-param-gather the all-gathers only start
// after the step, and the next forward waits for each bucket just before it reads it. Per DESIGN
// invariant 5 the trainer asks for this; it never calls a collective on gradients itself.
#pragma once

#include <memory>
#include <vector>

#include "backend/arena.h"
#include "comm/communicator.h"
#include "model/params.h"

namespace mt {

// The groups gradients are reduced over (null or size 1: nothing to do there).
struct GradSyncGroups {
  Communicator* tp = nullptr;  // the partial_over_tp parameters' gradients
  Communicator* dp = nullptr;  // every gradient, bucket by bucket (the distributed optimizer's shard group)
  // Several distributed-optimizer instances: each rank's reduced shard is then all-reduced over
  // the ranks holding the same shard in the other instances.
  Communicator* dp_inter = nullptr;
  // The first and last pipeline stage: the two copies of the tied embedding (shared_embedding)
  // have their gradients summed over it, after the dp reduction (Megatron's
  // _allreduce_embedding_grads), so the copies stay identical.
  Communicator* embedding = nullptr;
};

class DataParallelSync {
 public:
  // params laid out with params.layout() for the dp group's size. ddp: the settings the layout was made with (use_distributed_optimizer: each dp rank
  // owns DdpBucket::shard(dp rank) of every bucket), plus overlap_param_gather and
  // average_in_collective (the reductions average over dp instead of summing: the trainer then
  // leaves Megatron's 1/dp out of the grad scale).
  DataParallelSync(ParamStore& params, const GradSyncGroups& groups, const DdpConfig& ddp, Backend& backend,
                   MemoryTracker* tracker);

  // --overlap-grad-reduce: the backward that follows is the global batch's last, so the gradients
  // it finishes (grads_ready) are final. A no-op without overlap.
  void start_last_micro_batch();
  // The Stage's GradsReady callback: these parameters' gradients are complete for this backward.
  // After start_last_micro_batch, their partial gradients (Param::partial_over_tp) are all-reduced
  // over tp at once and every bucket they complete starts its dp reduction; otherwise nothing happens.
  void grads_ready(ParamStore::IndexRange params);
  // Completes the reduction of every gradient (whatever has not started yet, then waits):
  // 1. parameters whose gradients are partial sums over tp (Param::partial_over_tp: the norms on
  //    s/t tokens under --sequence-parallel, routers, the query and key norms on a rank's heads)
  //    are all-reduced over tp;
  // 2. gradients are summed (or averaged) over dp bucket by bucket: all-reduced, or
  //    reduce-scattered into this rank's shard (the rest of the buffer then holds stale partial
  //    sums, which nothing reads);
  // 3. the tied embedding's gradient summed over the embedding group (under the distributed
  //    optimizer the copies' buckets shard alike, so each rank's shard is summed with its twin).
  void reduce_grads();
  // Distributed optimizer only (a no-op otherwise): every rank's updated shard of each bucket's
  // values, all-gathered into every rank's parameters. With --overlap-param-gather this only
  // starts the gathers (the embedding's bucket first, as the forward needs it first): all of them
  // at once, where Megatron starts the first and each forward pre-hook the next; the same values,
  // more gathers in flight.
  void gather_params();
  // The Stage's ParamsNeeded callback (before a forward reads these parameters): waits for the
  // gathers of their buckets.
  void params_needed(ParamStore::IndexRange params);
  // Waits for every gather still in flight (before anything reads all parameters at once, such
  // as a checkpoint or a test).
  void finish_param_gather();

 private:
  void start_step();  // no gradient final yet
  void finish_param(size_t param);
  void start_bucket(size_t bucket);
  void wait(size_t bucket);

  ParamStore& params_;
  Communicator* tp_;
  Communicator* dp_;
  Communicator* dp_inter_;
  Communicator* embedding_;
  bool distributed_;
  bool overlap_grads_;
  bool overlap_gather_;
  ReduceOp reduce_op_;
  bool last_micro_batch_ = false;
  std::vector<bool> param_done_;      // this step: its gradient is final (and tp-reduced)
  std::vector<size_t> bucket_left_;   // this step: parameters of each bucket not done yet
  std::vector<BufferRange> shard_at_;  // per bucket: where its reduced shard lands in grad_shards_
  std::unique_ptr<Arena> scratch_;     // category comm
  TensorView grad_shards_;  // distributed optimizer: every bucket's reduced shard, side by side
  // Per bucket: its gradient reduction (overlap) or, between a step and the next forward, its
  // parameter gather (--overlap-param-gather); never both at once. Declared last so that
  // destruction completes them before the buffers they write go.
  std::vector<std::unique_ptr<CommRequest>> in_flight_;
};

}  // namespace mt
