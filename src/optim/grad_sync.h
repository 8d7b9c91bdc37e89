// Owns data-parallel synchronisation around the optimizer step (Megatron's finalize_model_grads
// and the distributed optimizer's parameter all-gather): after the backward of a global batch's
// last micro-batch, the sequence-parallel norm gradients over the tensor-parallel group, then the
// gradient buffer over the data-parallel group bucket by bucket: all-reduced, or under the
// distributed optimizer reduce-scattered so each rank holds the sum of its shard only; after the
// step, the updated shards all-gathered back into every rank's parameters. Per DESIGN invariant 5
// the trainer asks for this; it never calls a collective on gradients itself.
#pragma once

#include <memory>

#include "backend/arena.h"
#include "comm/communicator.h"
#include "model/params.h"

namespace mt {

class DataParallelSync {
 public:
  // params laid out with params.layout() for `dp`'s size; tp / dp null or size 1: nothing to do
  // there. distributed_optimizer: each dp rank owns DdpBucket::shard(dp rank) of every bucket.
  DataParallelSync(ParamStore& params, Communicator* tp, Communicator* dp, bool distributed_optimizer,
                   Backend& backend, MemoryTracker* tracker);

  // 1. Parameters computed on s/t tokens under --sequence-parallel (the norms) are all-reduced over
  //    tp (their gradients are partial sums until then).
  // 2. Gradients are summed over dp bucket by bucket (the grad scale already carries Megatron's
  //    1/dp, so the sum is the average): all-reduced, or reduce-scattered into this rank's shard
  //    (the rest of the buffer then holds stale partial sums, which nothing reads).
  void reduce_grads();
  // Distributed optimizer only (a no-op otherwise): every rank's updated shard of each bucket's
  // values, all-gathered into every rank's parameters.
  void gather_params();

 private:
  ParamStore& params_;
  Communicator* tp_;
  Communicator* dp_;
  bool distributed_;
  std::unique_ptr<Arena> scratch_;  // category comm: one shard of the largest bucket, grads and values
  TensorView grad_shard_, value_shard_;
};

}  // namespace mt
