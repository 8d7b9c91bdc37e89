#include "optim/grad_sync.h"

#include <algorithm>

#include "ops/elementwise.h"

namespace mt {

namespace {
bool active(const Communicator* c) { return c != nullptr && c->size() > 1; }
}  // namespace

DataParallelSync::DataParallelSync(ParamStore& params, const GradSyncGroups& groups, const DdpConfig& ddp,
                                   Backend& backend, MemoryTracker* tracker)
    : params_(params),
      tp_(groups.tp),
      dp_(groups.dp),
      dp_inter_(groups.dp_inter),
      embedding_(groups.embedding),
      // With several instances a shard group of one still all-reduces its (whole-bucket) shard.
      distributed_(ddp.use_distributed_optimizer && (active(dp_) || active(dp_inter_))),
      overlap_grads_(ddp.overlap_grad_reduce && active(dp_)),
      overlap_gather_(ddp.overlap_param_gather && distributed_),
      reduce_op_(ddp.average_in_collective ? ReduceOp::avg : ReduceOp::sum) {
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  in_flight_.resize(buckets.size());
  if (!distributed_) return;
  // The reduce-scatter takes separate input and output buffers, so each bucket's reduced shard
  // lands in scratch (several may be in flight) before it is copied to its place.
  int64_t total = 0;
  for (const DdpBucket& b : buckets) {
    const int64_t n = b.shard(0, dp_->size()).numel();
    shard_at_.push_back({total, total + n});
    total += n;
  }
  Arena measure(MemCategory::comm);
  measure.alloc(DType::f32, {total});
  scratch_ = std::make_unique<Arena>(backend, MemCategory::comm, measure.used(), tracker);
  grad_shards_ = scratch_->alloc(DType::f32, {total});
}

void DataParallelSync::start_step() {
  param_done_.assign(params_.params().size(), false);
  bucket_left_.clear();
  for (const DdpBucket& b : params_.layout().buckets) bucket_left_.push_back(b.params.size());
}

void DataParallelSync::start_last_micro_batch() {
  if (!overlap_grads_) return;
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
  if (active(tp_) && p.partial_over_tp) tp_->all_reduce(p.grad, ReduceOp::sum);
  const size_t bucket = static_cast<size_t>(params_.layout().param_bucket[i]);
  if (--bucket_left_[bucket] == 0) start_bucket(bucket);
}

void DataParallelSync::start_bucket(size_t b) {
  if (!active(dp_) && !distributed_) return;
  const TensorView grads = params_.bucket_grads(b);
  if (!distributed_) {
    if (overlap_grads_)
      in_flight_[b] = dp_->all_reduce_async(grads, reduce_op_);
    else
      dp_->all_reduce(grads, reduce_op_);
    return;
  }
  const TensorView sum = grad_shards_.rows(shard_at_[b].start, shard_at_[b].numel());
  if (overlap_grads_)
    in_flight_[b] = dp_->reduce_scatter_async(sum, grads, reduce_op_);
  else
    dp_->reduce_scatter(sum, grads, reduce_op_);
}

void DataParallelSync::wait(size_t b) {
  if (!in_flight_[b]) return;
  in_flight_[b]->wait();
  in_flight_[b].reset();
}

void DataParallelSync::reduce_grads() {
  finish_param_gather();  // (a step without a forward)
  if (!last_micro_batch_) start_step();  // nothing started during the backward
  // Whatever the backward did not finish (all of it without overlap), in parameter order.
  for (size_t i = 0; i < params_.params().size(); ++i) finish_param(i);
  last_micro_batch_ = false;
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  for (size_t b = 0; b < buckets.size(); ++b) {
    wait(b);
    if (!distributed_) continue;
    const TensorView sum = grad_shards_.rows(shard_at_[b].start, shard_at_[b].numel());
    // Several instances: the instance's sum, then over the instances (Megatron does not overlap
    // this all-reduce either).
    if (active(dp_inter_)) dp_inter_->all_reduce(sum, reduce_op_);
    const BufferRange mine = buckets[b].shard(dp_->rank(), dp_->size());
    copy_tensor(params_.grad_buffer().rows(mine.start, mine.numel()), sum);
  }
  if (active(embedding_))
    for (const Param& p : params_.params())
      if (p.shared_embedding) embedding_->all_reduce(p.grad, ReduceOp::sum);
}

void DataParallelSync::gather_params() {
  if (!distributed_) return;
  const std::vector<DdpBucket>& buckets = params_.layout().buckets;
  // The last bucket holds the first parameters registered (the embedding), which the next forward
  // reads first.
  for (size_t b = buckets.size(); b-- > 0;) {
    const BufferRange mine = buckets[b].shard(dp_->rank(), dp_->size());
    const TensorView values = params_.bucket_values(b);
    const TensorView shard = values.rows(mine.start - buckets[b].range.start, mine.numel());
    if (overlap_gather_)
      in_flight_[b] = dp_->all_gather_async(values, shard);
    else
      dp_->all_gather(values, shard);
  }
}

void DataParallelSync::params_needed(ParamStore::IndexRange range) {
  if (!overlap_gather_) return;
  for (size_t i = range.first; i < range.second; ++i) wait(static_cast<size_t>(params_.layout().param_bucket[i]));
  for (const auto& request : in_flight_)  // between two layers' forward: move the other gathers along
    if (request) request->progress();
}

void DataParallelSync::finish_param_gather() {
  if (!overlap_gather_) return;
  for (size_t b = 0; b < in_flight_.size(); ++b) wait(b);
}

}  // namespace mt
