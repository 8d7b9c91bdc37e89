#include "model/param_layout.h"

#include <algorithm>
#include <numeric>

#include "base/error.h"

namespace mt {

namespace {
int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }
}  // namespace

std::optional<int64_t> DdpConfig::effective_bucket_size() const {
  if (!overlap_grad_reduce) return std::nullopt;
  if (bucket_size > 0) return bucket_size;
  return std::max<int64_t>(40'000'000, int64_t{1'000'000} * data_parallel_size);
}

int DdpConfig::shard_size() const {
  const int n = num_distributed_optimizer_instances;
  MT_CHECK(n > 0 && data_parallel_size % n == 0)
      << "--num-distributed-optimizer-instances " << n << " does not divide the data-parallel size "
      << data_parallel_size << "; choose a divisor of it";
  return data_parallel_size / n;
}

BufferRange DdpBucket::shard(int rank, int data_parallel_size) const {
  MT_CHECK(data_parallel_size > 0 && rank >= 0 && rank < data_parallel_size)
      << "data-parallel rank " << rank << " out of [0, " << data_parallel_size << ")";
  MT_CHECK(range.numel() % data_parallel_size == 0)
      << "a bucket of " << range.numel() << " elements does not split into " << data_parallel_size
      << " equal pieces (buckets are padded for that only under the distributed optimizer)";
  const int64_t piece = range.numel() / data_parallel_size;
  return {range.start + rank * piece, range.start + (rank + 1) * piece};
}

DdpBufferLayout ddp_buffer_layout(const std::vector<LayoutParam>& params, const DdpConfig& config) {
  MT_CHECK(config.data_parallel_size > 0) << "the data-parallel size must be positive";
  MT_CHECK(config.bucket_size >= 0) << "--ddp-bucket-size must be positive (0: Megatron's default), got " << config.bucket_size;
  const bool distopt = config.use_distributed_optimizer;
  const int64_t bucket_divisor =
      std::lcm(std::lcm(int64_t{config.shard_size()}, int64_t{128}),
               config.pad_buckets_for_high_nccl_busbw ? int64_t{1} << 16 : int64_t{1});
  const std::optional<int64_t> bucket_size = config.effective_bucket_size();

  DdpBufferLayout layout;
  layout.params.resize(params.size());
  layout.param_bucket.resize(params.size());
  int64_t bucket_start = 0;
  DdpBucket open;  // the bucket being filled
  // Closes the open bucket at `end` (its last parameter's end, or where the next one starts);
  // returns the padded end, where the next bucket starts.
  auto close = [&](int64_t end) {
    open.numel_unpadded = end - bucket_start;
    open.range = {bucket_start, distopt ? round_up(end, bucket_divisor) : end};
    layout.numel_unpadded += open.numel_unpadded;
    bucket_start = open.range.end;
    layout.buckets.push_back(std::move(open));
    open = DdpBucket{};
    return bucket_start;
  };
  int64_t next = 0;  // where the next parameter may start
  for (int i = static_cast<int>(params.size()) - 1; i >= 0; --i) {
    const LayoutParam& p = params[static_cast<size_t>(i)];
    MT_CHECK(p.numel > 0) << "parameter " << i << " has " << p.numel << " elements";
    int64_t start = distopt ? round_up(next, 64) : next;
    const bool own_bucket = p.shared_embedding && distopt;
    if (own_bucket && !open.params.empty()) start = close(start);
    const int64_t end = start + p.numel;
    layout.params[static_cast<size_t>(i)] = {start, end};
    layout.param_bucket[static_cast<size_t>(i)] = static_cast<int>(layout.buckets.size());
    open.params.push_back(i);
    next = (bucket_size && end - bucket_start >= *bucket_size) || own_bucket ? close(end) : end;
  }
  if (!open.params.empty()) close(next);
  layout.numel = bucket_start;
  return layout;
}

int64_t selected_state_elements(const DdpBufferLayout& layout, const std::vector<bool>& selected, int shard_size) {
  int64_t most = 0;
  for (int r = 0; r < std::max(shard_size, 1); ++r) {
    int64_t n = 0;
    for (const DdpBucket& bucket : layout.buckets) {
      const BufferRange mine = shard_size > 1 ? bucket.shard(r, shard_size) : bucket.range;
      for (int i : bucket.params) {
        if (!selected[static_cast<size_t>(i)]) continue;
        const BufferRange at = layout.params[static_cast<size_t>(i)];
        n += std::max<int64_t>(0, std::min(at.end, mine.end) - std::max(at.start, mine.start));
      }
    }
    most = std::max(most, n);
  }
  return most;
}

}  // namespace mt
