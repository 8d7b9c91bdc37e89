#include "optim/grad_sync.h"

#include <algorithm>

#include "ops/elementwise.h"

namespace mt {

namespace {
bool active(const Communicator* c) { return c != nullptr && c->size() > 1; }
}  // namespace

DataParallelSync::DataParallelSync(ParamStore& params, Communicator* tp, Communicator* dp, bool distributed_optimizer,
                                   Backend& backend, MemoryTracker* tracker)
    : params_(params), tp_(tp), dp_(dp), distributed_(distributed_optimizer && active(dp)) {
  if (!distributed_) return;
  // The collectives take separate input and output buffers, so a rank's shard travels through
  // scratch of the largest shard.
  int64_t shard = 0;
  for (const DdpBucket& b : params_.layout().buckets) shard = std::max(shard, b.shard(0, dp_->size()).numel());
  const DType value_dtype = params_.bucket_values(0).dtype;
  Arena measure(MemCategory::comm);
  measure.alloc(DType::f32, {shard});
  measure.alloc(value_dtype, {shard});
  scratch_ = std::make_unique<Arena>(backend, MemCategory::comm, measure.used(), tracker);
  grad_shard_ = scratch_->alloc(DType::f32, {shard});
  value_shard_ = scratch_->alloc(value_dtype, {shard});
}

void DataParallelSync::reduce_grads() {
  if (active(tp_))
    for (const Param& p : params_.params())
      if (p.sequence_parallel) tp_->all_reduce(p.grad, ReduceOp::sum);
  if (!active(dp_)) return;
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const TensorView grads = params_.bucket_grads(b);
    if (!distributed_) {
      dp_->all_reduce(grads, ReduceOp::sum);
      continue;
    }
    const BufferRange mine = buckets[b].shard(dp_->rank(), dp_->size());
    const TensorView sum = grad_shard_.rows(0, mine.numel());
    dp_->reduce_scatter(sum, grads, ReduceOp::sum);
    copy_tensor(params_.grad_buffer().rows(mine.start, mine.numel()), sum);
  }
}

void DataParallelSync::gather_params() {
  if (!distributed_) return;
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const BufferRange mine = buckets[b].shard(dp_->rank(), dp_->size());
    const TensorView shard = value_shard_.rows(0, mine.numel());
    const TensorView values = params_.bucket_values(b);
    copy_tensor(shard, values.rows(mine.start - buckets[b].range.start, mine.numel()));
    dp_->all_gather(values, shard);
  }
}

}  // namespace mt
