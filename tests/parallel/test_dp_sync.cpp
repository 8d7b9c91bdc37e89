// Data-parallel gradient and parameter synchronisation (optim/grad_sync.h) on the job's ranks as
// the dp group: the values each rank ends with, and the collectives and bytes it sends. Plain
// DDP all-reduces each bucket once; the distributed optimizer reduce-scatters each bucket's
// gradients (rank r keeps the sum of shard r) and all-gathers each bucket's values. With several
// buckets (--overlap-grad-reduce), the reductions start as the backward reports its parameters.
#include <map>

#include "comm/counting_communicator.h"
#include "model/params.h"
#include "optim/grad_sync.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

// Gradient element i of rank r (distinct per rank and element, exact in f32 sums of few ranks).
float grad_value(int r, int64_t i) { return static_cast<float>((i % 97) * 4 + r); }

void check(bool distributed, int64_t bucket_size) {
  const int d = world().size(), rank = world().rank();
  SCOPED_TRACE(std::string(distributed ? "distributed optimizer" : "plain DDP") + ", bucket size " +
               std::to_string(bucket_size));
  const ModelConfig c = tiny_gpt(true, 8);
  DdpConfig ddp{d};
  ddp.use_distributed_optimizer = distributed;
  ddp.overlap_grad_reduce = bucket_size > 0;
  ddp.bucket_size = bucket_size;
  ParamStore store(c, StageRange::whole(c), cpu_backend(), nullptr, 0, ddp);
  const DdpBufferLayout& layout = store.layout();
  ASSERT_EQ(layout.buckets.size() > 1, bucket_size > 0);
  // Gradients: rank-specific values in every parameter (the padding stays 0).
  for (const Param& p : store.params())
    for (int64_t i = 0; i < p.grad.numel(); ++i) p.grad.f32()[i] = grad_value(rank, p.buffer_offset + i);
  CountingCommunicator counting(world());
  const bool overlap = bucket_size > 0;
  DataParallelSync sync(store, {nullptr, &counting}, ddp, cpu_backend(), nullptr);
  if (overlap) {  // as the last micro-batch's backward reports them: head, layers from the last, embedding
    sync.start_last_micro_batch();
    sync.grads_ready(store.head_params());
    for (int64_t layer = c.num_layers - 1; layer >= 0; --layer) {
      sync.grads_ready(store.layer_params(layer));
      if (layer == c.num_layers - 1) {
        EXPECT_FALSE(counting.records().empty());  // the first bucket started inside the backward
      }
    }
    sync.grads_ready(store.embedding_params());
  }
  sync.reduce_grads();
  std::map<std::string, std::pair<int, size_t>> sent;  // kind -> (calls, bytes)
  for (const CollectiveRecord& r : counting.records()) {
    sent[r.kind].first += 1;
    sent[r.kind].second += r.bytes;
  }
  const int buckets = static_cast<int>(layout.buckets.size());
  const size_t buffer_bytes = static_cast<size_t>(layout.numel) * 4;
  EXPECT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[distributed ? "reduce_scatter" : "all_reduce"], std::make_pair(buckets, buffer_bytes));
  // Every gradient element this rank will read holds the sum over the ranks.
  float rank_sum = 0.0f;
  for (int r = 0; r < d; ++r) rank_sum += static_cast<float>(r);
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const BufferRange mine = distributed ? layout.buckets[b].shard(rank, d) : layout.buckets[b].range;
    for (int i : layout.buckets[b].params) {
      const BufferRange at = layout.params[static_cast<size_t>(i)];
      for (int64_t k = std::max(at.start, mine.start); k < std::min(at.end, mine.end); ++k)
        ASSERT_EQ(store.grad_buffer().f32()[k], static_cast<float>(d) * grad_value(0, k) + rank_sum) << k;
    }
  }
  // The values: each rank writes its shard, and after the gather every rank holds all of them.
  counting.clear();
  for (const Param& p : store.params())
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = -1.0f;
  for (const DdpBucket& bucket : layout.buckets) {
    const BufferRange mine = distributed ? bucket.shard(rank, d) : bucket.range;
    for (int i : bucket.params) {
      const Param& p = store.params()[static_cast<size_t>(i)];
      for (int64_t k = std::max(p.buffer_offset, mine.start); k < std::min(p.buffer_offset + p.value.numel(), mine.end); ++k)
        p.value.f32()[k - p.buffer_offset] = static_cast<float>(k);
    }
  }
  sync.gather_params();
  if (distributed) {
    EXPECT_EQ(counting.records().size(), static_cast<size_t>(buckets));
    size_t gathered = 0;
    for (const CollectiveRecord& r : counting.records()) gathered += r.kind == "all_gather" ? r.bytes : 0;
    EXPECT_EQ(gathered, buffer_bytes);
  } else {
    EXPECT_TRUE(counting.records().empty());  // every rank updated everything itself
  }
  for (const Param& p : store.params())
    for (int64_t i = 0; i < p.value.numel(); ++i)
      ASSERT_EQ(p.value.f32()[i], static_cast<float>(p.buffer_offset + i)) << p.name << " " << i;
}

// --overlap-param-gather: gather_params only starts the all-gathers (in place, the embedding's
// bucket first); a forward's params_needed waits for exactly the buckets it reads, and
// finish_param_gather for the rest. --ddp-average-in-collective: the reduction averages.
TEST(DpSync, OverlappedParameterGatherWaitsPerBucket) {
  const int d = world().size(), rank = world().rank();
  const ModelConfig c = tiny_gpt(true, 8);
  DdpConfig ddp{d};
  ddp.use_distributed_optimizer = ddp.overlap_grad_reduce = ddp.overlap_param_gather = true;
  ddp.average_in_collective = true;
  ddp.bucket_size = 700;
  ParamStore store(c, StageRange::whole(c), cpu_backend(), nullptr, 0, ddp);
  const DdpBufferLayout& layout = store.layout();
  ASSERT_GT(layout.buckets.size(), 2u);
  for (const Param& p : store.params())
    for (int64_t i = 0; i < p.grad.numel(); ++i) p.grad.f32()[i] = grad_value(rank, p.buffer_offset + i);
  CountingCommunicator counting(world());
  DataParallelSync sync(store, {nullptr, &counting}, ddp, cpu_backend(), nullptr);
  sync.reduce_grads();
  float rank_mean = 0.0f;
  for (int r = 0; r < d; ++r) rank_mean += static_cast<float>(r) / static_cast<float>(d);
  for (const DdpBucket& bucket : layout.buckets) {
    const BufferRange mine = bucket.shard(rank, d);
    for (int i : bucket.params) {
      const BufferRange at = layout.params[static_cast<size_t>(i)];
      for (int64_t k = std::max(at.start, mine.start); k < std::min(at.end, mine.end); ++k)
        ASSERT_FLOAT_EQ(store.grad_buffer().f32()[k], grad_value(0, k) + rank_mean) << k;
    }
  }
  // Each rank's shard holds its values; the rest is stale (-1) until gathered.
  for (const Param& p : store.params())
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      const int64_t k = p.buffer_offset + i;
      const DdpBucket& bucket = layout.buckets[static_cast<size_t>(layout.param_bucket[&p - store.params().data()])];
      const BufferRange mine = bucket.shard(rank, d);
      p.value.f32()[i] = k >= mine.start && k < mine.end ? static_cast<float>(k) : -1.0f;
    }
  counting.clear();
  sync.gather_params();
  ASSERT_EQ(counting.records().size(), layout.buckets.size());  // all started, none waited for
  auto whole = [&](size_t param) {
    const Param& p = store.params()[param];
    for (int64_t i = 0; i < p.value.numel(); ++i)
      if (p.value.f32()[i] != static_cast<float>(p.buffer_offset + i)) return false;
    return true;
  };
  const ParamStore::IndexRange embedding = store.embedding_params();
  sync.params_needed(embedding);
  for (size_t i = embedding.first; i < embedding.second; ++i) EXPECT_TRUE(whole(i)) << store.params()[i].name;
  sync.finish_param_gather();
  for (size_t i = 0; i < store.params().size(); ++i) EXPECT_TRUE(whole(i)) << store.params()[i].name;
  EXPECT_EQ(counting.records().size(), layout.buckets.size());  // waiting sends nothing more
}

TEST(DpSync, PlainDdpAllReducesEachBucketOnce) {
  check(false, 0);
  check(false, 700);
}

TEST(DpSync, DistributedOptimizerReduceScattersAndGathersEachBucket) {
  check(true, 0);
  check(true, 700);
}

}  // namespace
}  // namespace mt::test
