// Megatron's DDP buffer layout (param_and_grad_buffer.py) against hand-computed offsets: reverse
// order, 64-element parameter starts and lcm(dp, 128) bucket ends under the distributed optimizer,
// bucket boundaries at --ddp-bucket-size, the shared embedding's own bucket, and each rank's shard.
#include "model/params.h"
#include "model/param_layout.h"
#include "testing.h"

namespace mt {
namespace {

std::vector<int> order(const DdpBucket& b) { return b.params; }

TEST(DdpLayout, PlainDdpIsOneUnpaddedBucketInReverseOrder) {
  const DdpBufferLayout l = ddp_buffer_layout({{10}, {3}, {100}, {7}}, DdpConfig{4});
  EXPECT_EQ(l.params[3], (BufferRange{0, 7}));
  EXPECT_EQ(l.params[2], (BufferRange{7, 107}));
  EXPECT_EQ(l.params[1], (BufferRange{107, 110}));
  EXPECT_EQ(l.params[0], (BufferRange{110, 120}));
  ASSERT_EQ(l.buckets.size(), 1u);
  EXPECT_EQ(l.buckets[0].range, (BufferRange{0, 120}));
  EXPECT_EQ(order(l.buckets[0]), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(l.numel, 120);
  EXPECT_EQ(l.numel_unpadded, 120);
  // --overlap-grad-reduce with a bucket size: buckets close once they hold that many elements.
  DdpConfig overlap{4};
  overlap.overlap_grad_reduce = true;
  overlap.bucket_size = 100;
  const DdpBufferLayout b = ddp_buffer_layout({{10}, {3}, {100}, {7}}, overlap);
  ASSERT_EQ(b.buckets.size(), 2u);
  EXPECT_EQ(b.buckets[0].range, (BufferRange{0, 107}));  // 7 + 100 >= 100
  EXPECT_EQ(b.buckets[1].range, (BufferRange{107, 120}));
  EXPECT_EQ(b.param_bucket, (std::vector<int>{1, 1, 0, 0}));
}

TEST(DdpLayout, DistributedOptimizerPadsParameterStartsAndBucketEnds) {
  DdpConfig c{4};
  c.use_distributed_optimizer = true;
  c.overlap_grad_reduce = true;
  c.bucket_size = 100;
  const DdpBufferLayout l = ddp_buffer_layout({{10}, {3}, {100}, {7}}, c);
  // p3 [0, 7); p2 starts at 64 (64-element alignment), ends 164 >= 100: bucket 0 closes, its end
  // padded to lcm(4, 128) = 128 -> 256. p1 [256, 259); p0 at 320 (alignment), [320, 330); the
  // last bucket's end 330 pads to 384.
  EXPECT_EQ(l.params[3], (BufferRange{0, 7}));
  EXPECT_EQ(l.params[2], (BufferRange{64, 164}));
  EXPECT_EQ(l.params[1], (BufferRange{256, 259}));
  EXPECT_EQ(l.params[0], (BufferRange{320, 330}));
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].range, (BufferRange{0, 256}));
  EXPECT_EQ(l.buckets[0].numel_unpadded, 164);
  EXPECT_EQ(l.buckets[1].range, (BufferRange{256, 384}));
  EXPECT_EQ(l.buckets[1].numel_unpadded, 74);
  EXPECT_EQ(l.numel, 384);
  EXPECT_EQ(l.numel_unpadded, 238);
  // Rank r owns the r-th quarter of every bucket.
  EXPECT_EQ(l.buckets[0].shard(0, 4), (BufferRange{0, 64}));
  EXPECT_EQ(l.buckets[0].shard(3, 4), (BufferRange{192, 256}));
  EXPECT_EQ(l.buckets[1].shard(1, 4), (BufferRange{288, 320}));
  EXPECT_THROW(l.buckets[0].shard(4, 4), Error);
  // dp = 3: lcm(3, 128) = 384; with the NCCL bus-bandwidth padding lcm(3, 128, 2^16) = 196608.
  c.data_parallel_size = 3;
  EXPECT_EQ(ddp_buffer_layout({{10}, {3}, {100}, {7}}, c).numel, 768);
  c.pad_buckets_for_high_nccl_busbw = true;
  EXPECT_EQ(ddp_buffer_layout({{10}, {3}, {100}, {7}}, c).numel, 2 * 196608);
}

TEST(DdpLayout, SharedEmbeddingGetsItsOwnBucketUnderTheDistributedOptimizer) {
  DdpConfig c{2};
  c.use_distributed_optimizer = true;  // one bucket otherwise (no --overlap-grad-reduce)
  const std::vector<LayoutParam> params = {{20, true}, {5}, {6}};
  const DdpBufferLayout l = ddp_buffer_layout(params, c);
  // b [0, 6), a [64, 69); the embedding starts at 128: the open bucket closes there (already a
  // multiple of lcm(2, 128)), and the embedding's own bucket [128, 148) pads to 256.
  EXPECT_EQ(l.params[2], (BufferRange{0, 6}));
  EXPECT_EQ(l.params[1], (BufferRange{64, 69}));
  EXPECT_EQ(l.params[0], (BufferRange{128, 148}));
  ASSERT_EQ(l.buckets.size(), 2u);
  EXPECT_EQ(l.buckets[0].range, (BufferRange{0, 128}));
  EXPECT_EQ(l.buckets[0].numel_unpadded, 128);
  EXPECT_EQ(l.buckets[1].range, (BufferRange{128, 256}));
  EXPECT_EQ(order(l.buckets[1]), (std::vector<int>{0}));
  // Plain DDP keeps it with the others.
  EXPECT_EQ(ddp_buffer_layout(params, DdpConfig{2}).buckets.size(), 1u);
}

TEST(DdpLayout, ModelParametersTileTheBufferAndTheTiedCopiesAreMarked) {
  ModelConfig c = test::tiny_gpt(false, 9);  // tied embeddings
  c.num_layers = 4;
  c.finalize();
  DdpConfig d{4};
  d.use_distributed_optimizer = true;
  d.overlap_grad_reduce = true;
  d.bucket_size = 2000;
  ParamStore first(c, {0, 2, true, false}, cpu_backend(), nullptr, 0, d);
  ParamStore last(c, {2, 4, false, true}, cpu_backend(), nullptr, 0, d);
  ParamStore whole(c, StageRange::whole(c), cpu_backend(), nullptr, 0, d);
  EXPECT_TRUE(first.get("embedding.word_embeddings.weight").shared_embedding);
  EXPECT_TRUE(last.get("embedding.word_embeddings.weight").shared_embedding);
  EXPECT_FALSE(whole.get("embedding.word_embeddings.weight").shared_embedding);
  for (ParamStore* store : {&first, &last, &whole}) {
    const std::vector<Param>& params = store->params();
    const DdpBufferLayout& l = store->layout();
    // Values and gradients sit at their layout offsets of the two buffers.
    EXPECT_EQ(store->grad_buffer().numel(), l.numel);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].buffer_offset, l.params[i].start);
      EXPECT_EQ(params[i].grad.f32(), store->grad_buffer().f32() + l.params[i].start) << params[i].name;
      EXPECT_EQ(params[i].value.f32(), params[0].value.f32() - l.params[0].start + l.params[i].start);
    }
    int64_t previous_end = 0;
    for (size_t k = 0; k < l.buckets.size(); ++k) {
      const DdpBucket& b = l.buckets[k];
      EXPECT_EQ(b.range.start, previous_end);
      EXPECT_EQ(b.range.numel() % 128, 0);
      previous_end = b.range.end;
      int last_index = static_cast<int>(params.size());
      for (int i : b.params) {
        EXPECT_LT(i, last_index);  // reverse registration order
        last_index = i;
        EXPECT_EQ(l.params[i].start % 64, 0);
        EXPECT_EQ(l.params[i].numel(), params[i].value.numel());
        EXPECT_GE(l.params[i].start, b.range.start);
        EXPECT_LE(l.params[i].end, b.range.start + b.numel_unpadded);
        EXPECT_EQ(l.param_bucket[i], static_cast<int>(k));
      }
      for (int r = 0; r < 4; ++r) EXPECT_EQ(b.shard(r, 4).numel() * 4, b.range.numel());
      // The shared embedding sits alone.
      for (int i : b.params)
        if (params[i].shared_embedding) {
          EXPECT_EQ(b.params.size(), 1u) << params[i].name;
        }
    }
    EXPECT_EQ(l.numel, previous_end);
  }
}

// Several distributed-optimizer instances: buckets pad for the ranks of one instance (Megatron's
// intra-partial group), while the default bucket size still counts all of dp.
TEST(DdpLayout, OptimizerInstancesPadForTheRanksOfOne) {
  DdpConfig c{6};
  c.use_distributed_optimizer = true;
  EXPECT_EQ(ddp_buffer_layout({{10}}, c).numel, 384);  // lcm(6, 128)
  c.num_distributed_optimizer_instances = 3;
  EXPECT_EQ(c.shard_size(), 2);
  const DdpBufferLayout l = ddp_buffer_layout({{10}}, c);
  EXPECT_EQ(l.numel, 128);  // lcm(2, 128)
  EXPECT_EQ(l.buckets[0].shard(1, c.shard_size()), (BufferRange{64, 128}));
  c.overlap_grad_reduce = true;
  c.data_parallel_size = 64;
  c.num_distributed_optimizer_instances = 2;
  EXPECT_EQ(*c.effective_bucket_size(), 64'000'000);
  c.num_distributed_optimizer_instances = 3;
  EXPECT_THROW(c.shard_size(), Error);
}

TEST(DdpLayout, DefaultBucketSizeIsMegatrons) {
  DdpConfig c{8};
  EXPECT_FALSE(c.effective_bucket_size().has_value());  // no overlap: one bucket
  c.overlap_grad_reduce = true;
  EXPECT_EQ(*c.effective_bucket_size(), 40'000'000);
  c.data_parallel_size = 64;
  EXPECT_EQ(*c.effective_bucket_size(), 64'000'000);
  c.bucket_size = 12345;
  EXPECT_EQ(*c.effective_bucket_size(), 12345);
  EXPECT_THROW(ddp_buffer_layout(std::vector<LayoutParam>{{0}}, c), Error);
  EXPECT_THROW(ddp_buffer_layout(std::vector<LayoutParam>{{4}}, DdpConfig{0}), Error);
}

}  // namespace
}  // namespace mt
