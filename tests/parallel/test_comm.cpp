// The MPI communicator against values every rank can compute itself: blocking and non-blocking
// all-reduce (sum, max), all-gather, reduce-scatter, broadcast, and split into sub-groups.
#include "parallel_testing.h"

namespace mt::test {
namespace {

// Element i of rank r's contribution.
float value(int r, int64_t i) { return static_cast<float>(r + 1) * 0.5f + static_cast<float>(i % 7); }

TEST(Comm, AllReduceSumAndMax) {
  Communicator& w = world();
  const int n = w.size();
  HostTensor a(DType::f32, {1000}), b(DType::f32, {1000});
  for (int64_t i = 0; i < 1000; ++i) a.f32()[i] = b.f32()[i] = value(w.rank(), i);
  w.all_reduce(a.view(), ReduceOp::sum);
  w.all_reduce_async(b.view(), ReduceOp::max)->wait();
  for (int64_t i = 0; i < 1000; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < n; ++r) sum += value(r, i);
    EXPECT_FLOAT_EQ(a.f32()[i], sum) << i;
    EXPECT_FLOAT_EQ(b.f32()[i], value(n - 1, i)) << i;
  }
}

TEST(Comm, AllGatherAndReduceScatterAreRankOrdered) {
  Communicator& w = world();
  const int n = w.size();
  const int64_t part = 33;
  HostTensor mine(DType::f32, {part}), all(DType::f32, {part * n}), all2(DType::f32, {part * n});
  for (int64_t i = 0; i < part; ++i) mine.f32()[i] = value(w.rank(), i);
  w.all_gather(all.view(), mine.view());
  w.all_gather_async(all2.view(), mine.view())->wait();
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < part; ++i) {
      EXPECT_EQ(all.f32()[r * part + i], value(r, i));
      EXPECT_EQ(all2.f32()[r * part + i], value(r, i));
    }
  // Every rank contributes value(rank, j) at position j of the whole; rank r keeps block r of the sum.
  HostTensor whole(DType::f32, {part * n}), out(DType::f32, {part}), out2(DType::f32, {part});
  for (int64_t j = 0; j < part * n; ++j) whole.f32()[j] = value(w.rank(), j);
  w.reduce_scatter(out.view(), whole.view(), ReduceOp::sum);
  w.reduce_scatter_async(out2.view(), whole.view(), ReduceOp::sum)->wait();
  for (int64_t i = 0; i < part; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < n; ++r) sum += value(r, w.rank() * part + i);
    EXPECT_FLOAT_EQ(out.f32()[i], sum);
    EXPECT_FLOAT_EQ(out2.f32()[i], sum);
  }
}

TEST(Comm, BroadcastAndSplit) {
  Communicator& w = world();
  HostTensor t(DType::i32, {5});
  for (int i = 0; i < 5; ++i) t.i32()[i] = w.rank() * 10 + i;
  const int root = w.size() - 1;
  w.broadcast(t.view(), root);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.i32()[i], root * 10 + i);
  // Even and odd ranks, ordered by descending world rank.
  std::unique_ptr<Communicator> half = w.split(w.rank() % 2, -w.rank());
  int members = 0, largest = 0;
  for (int q = 0; q < w.size(); ++q)
    if (q % 2 == w.rank() % 2) ++members, largest = q;
  EXPECT_EQ(half->size(), members);
  int mine = w.rank();
  half->all_reduce(TensorView(&mine, DType::i32, {1}), ReduceOp::max);
  EXPECT_EQ(mine, largest);
  int above = 0;  // same-parity ranks with a larger world rank come first
  for (int q = w.rank() + 1; q < w.size(); ++q) above += q % 2 == w.rank() % 2;
  EXPECT_EQ(half->rank(), above);
}

TEST(Comm, BadArgumentsAreClearErrors) {
  Communicator& w = world();
  HostTensor a(DType::f32, {4}), b(DType::f32, {5});
  EXPECT_THROW(w.all_gather(b.view(), a.view()), Error);
  HostTensor u(DType::u8, {4});
  EXPECT_THROW(w.all_reduce(u.view(), ReduceOp::sum), Error);
  EXPECT_THROW(w.broadcast(a.view(), w.size()), Error);
}

}  // namespace
}  // namespace mt::test
