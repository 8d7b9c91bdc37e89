#include "optim/grad_sync.h"

#include <algorithm>

#include "ops/elementwise.h"

namespace mt {

namespace {
bool active(const Communicator* c) { return c != nullptr && c->size() > 1; }
}  // namespace

DataParallelSync::DataParallelSync(ParamStore& params, Communicator* tp, Communicator* dp, bool distributed_optimizer,
                                   bool overlap_grad_reduce, Backend& backend, MemoryTracker* tracker)
    : params_(params),
      tp_(tp),
      dp_(dp),
      distributed_(distributed_optimizer && active(dp)),
      overlap_(overlap_grad_reduce && active(dp)) {
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  in_flight_.resize(buckets.size());
  if (!distributed_) return;
  // The collectives take separate input and output buffers, so a rank's shard travels through
  // scratch: each bucket's reduced shard (several may be in flight), and one shard of values.
  int64_t total = 0, largest = 0;
  for (const DdpBucket& b : buckets) {
    const int64_t n = b.shard(0, dp_->size()).numel();
    shard_at_.push_back({total, total + n});
    total += n;
    largest = std::max(largest, n);
  }
  const DType value_dtype = params_.bucket_values(0).dtype;
  Arena measure(MemCategory::comm);
  measure.alloc(DType::f32, {total});
  measure.alloc(value_dtype, {largest});
  scratch_ = std::make_unique<Arena>(backend, MemCategory::comm, measure.used(), tracker);
  grad_shards_ = scratch_->alloc(DType::f32, {total});
  value_shard_ = scratch_->alloc(value_dtype, {largest});
}

void DataParallelSync::start_step() {
  param_done_.assign(params_.params().size(), false);
  bucket_left_.clear();
  for (const DdpBucket& b : params_.layout().buckets) bucket_left_.push_back(b.params.size());
}

void DataParallelSync::start_last_micro_batch() {
  if (!overlap_) return;
  last_micro_batch_ = true;
  start_step();
}

void DataParallelSync::grads_ready(ParamStore::IndexRange range) {
  if (!last_micro_batch_) return;
  for (size_t i = range.first; i < range.second; ++i) finish_param(i);
  for (const auto& request : in_flight_)  // between two layers' backward: move the reductions along
    if (request) request->progress();
}

void DataParallelSync::finish_param(size_t i) {
  if (param_done_[i]) return;
  param_done_[i] = true;
  const Param& p = params_.params()[i];
  if (active(tp_) && p.sequence_parallel) tp_->all_reduce(p.grad, ReduceOp::sum);
  const size_t bucket = static_cast<size_t>(params_.layout().param_bucket[i]);
  if (--bucket_left_[bucket] == 0) start_bucket(bucket);
}

void DataParallelSync::start_bucket(size_t b) {
  if (!active(dp_)) return;
  const TensorView grads = params_.bucket_grads(b);
  if (!distributed_) {
    if (overlap_)
      in_flight_[b] = dp_->all_reduce_async(grads, ReduceOp::sum);
    else
      dp_->all_reduce(grads, ReduceOp::sum);
    return;
  }
  const TensorView sum = grad_shards_.rows(shard_at_[b].start, shard_at_[b].numel());
  if (overlap_)
    in_flight_[b] = dp_->reduce_scatter_async(sum, grads, ReduceOp::sum);
  else
    dp_->reduce_scatter(sum, grads, ReduceOp::sum);
}

void DataParallelSync::reduce_grads() {
  if (!last_micro_batch_) start_step();  // nothing started during the backward
  // Whatever the backward did not finish (all of it without overlap), in parameter order.
  for (size_t i = 0; i < params_.params().size(); ++i) finish_param(i);
  last_micro_batch_ = false;
  if (!active(dp_)) return;
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (in_flight_[b]) {
      in_flight_[b]->wait();
      in_flight_[b].reset();
    }
    if (!distributed_) continue;
    const BufferRange mine = buckets[b].shard(dp_->rank(), dp_->size());
    copy_tensor(params_.grad_buffer().rows(mine.start, mine.numel()),
                grad_shards_.rows(shard_at_[b].start, shard_at_[b].numel()));
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
