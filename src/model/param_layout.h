// Owns the layout of Megatron's DDP buffers (megatron/core/distributed/param_and_grad_buffer.py):
// where each parameter's values, gradient and optimizer state sit in contiguous buffers, how the buffer splits
// into buckets (the unit of one gradient reduction), and which piece of each bucket a
// data-parallel rank owns under the distributed optimizer. A pure function of the parameter
// sizes and the DDP settings, so every rank computes the same layout without communicating.
//
// Megatron's rules, reproduced exactly:
//  - parameters are laid out in reverse registration order (roughly the order backward
//    finishes them), so the first bucket fills first;
//  - a bucket closes once it holds at least bucket_size elements; without --overlap-grad-reduce
//    there is one bucket; bucket_size is --ddp-bucket-size or max(40M, 1M · dp);
//  - under the distributed optimizer every parameter starts at a multiple of 64 elements, each
//    bucket's end is padded to a multiple of lcm(d, 128) (lcm(d, 128, 2^16) with
//    --ddp-pad-buckets-for-high-nccl-busbw) so it splits into d equal pieces, d the ranks of one
//    optimizer instance (DdpConfig::shard_size: dp, or dp/N with N instances), and a
//    shared-embedding parameter (the tied word embedding on the first and last pipeline stages)
//    gets a bucket of its own, so both stages shard its optimizer state alike.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>


namespace mt {

struct DdpConfig {
  int data_parallel_size = 1;  // ranks the gradients are reduced over (dp × cp)
  bool use_distributed_optimizer = false;  // --use-distributed-optimizer
  // --num-distributed-optimizer-instances N (Megatron's partial distributed optimizer): the dp
  // ranks form N instances of dp/N consecutive ranks; the state is sharded within an instance and
  // each shard's gradients are all-reduced across the instances.
  int num_distributed_optimizer_instances = 1;
  bool overlap_grad_reduce = false;        // --overlap-grad-reduce
  int64_t bucket_size = 0;                 // --ddp-bucket-size; 0: Megatron's default
  bool pad_buckets_for_high_nccl_busbw = false;  // --ddp-pad-buckets-for-high-nccl-busbw
  // Not layout settings, but Megatron's DistributedDataParallelConfig holds them too (see
  // optim/grad_sync.h): --overlap-param-gather and --ddp-average-in-collective.
  bool overlap_param_gather = false;
  bool average_in_collective = false;

  // Elements after which a bucket closes; none: the whole buffer is one bucket.
  std::optional<int64_t> effective_bucket_size() const;
  // The ranks a bucket is sharded over: data_parallel_size / instances. Throws mt::Error naming
  // the flag when N does not divide the data-parallel size.
  int shard_size() const;
};

// What the layout needs to know of a parameter.
struct LayoutParam {
  int64_t numel = 0;
  bool shared_embedding = false;
};

// [start, end) in elements of the buffer.
struct BufferRange {
  int64_t start = 0, end = 0;
  int64_t numel() const { return end - start; }
  bool operator==(const BufferRange&) const = default;
};

struct DdpBucket {
  BufferRange range;           // padded (under the distributed optimizer)
  int64_t numel_unpadded = 0;  // up to the end of its last parameter
  std::vector<int> params;     // indices into the parameter list, in buffer order
  // Rank `rank`'s piece of the bucket: the rank-th of `data_parallel_size` (the shard size) equal
  // contiguous pieces.
  BufferRange shard(int rank, int data_parallel_size) const;
};

struct DdpBufferLayout {
  std::vector<BufferRange> params;  // by parameter index (registration order)
  std::vector<int> param_bucket;    // the bucket of each parameter
  std::vector<DdpBucket> buckets;   // in buffer order
  int64_t numel = 0;                // the buffer, padding included
  int64_t numel_unpadded = 0;       // Σ of the buckets' numel_unpadded
};

// `params` in registration order. Throws mt::Error on a non-positive size or dp.
DdpBufferLayout ddp_buffer_layout(const std::vector<LayoutParam>& params, const DdpConfig& config);

// The elements of the `selected` parameters a rank keeps state for: all of them (shard_size 1),
// or under the distributed optimizer the most any of the shard_size ranks has in its shards.
int64_t selected_state_elements(const DdpBufferLayout& layout, const std::vector<bool>& selected, int shard_size);

}  // namespace mt
