// The NCCL communicator on one rank (one GPU cannot hold two NCCL ranks): every collective and the
// staged messages on GPU tensors, host tensors passed to the host communicator. Skipped without a GPU.
#include "device_testing.h"
#if MT_HAVE_CUDA
#include "comm/nccl_communicator.h"
#endif

namespace mt::test {
namespace {

#if MT_HAVE_CUDA
std::unique_ptr<Communicator> one_rank_nccl() {
  static const std::unique_ptr<Communicator> self = make_self_communicator();
  return make_nccl_communicator(*self);
}
#endif

TEST(DeviceNccl, OneRankCollectivesAndMessages) {
  if (device_under_test() != Device::cuda) GTEST_SKIP() << device_under_test_reason();
#if MT_HAVE_CUDA
  DeviceCase dev;
  auto comm = one_rank_nccl();
  ASSERT_EQ(comm->size(), 1);
  HostTensor x = randn({1000}, 1);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    const TensorView d = dev.upload(x);
    comm->all_reduce(d, op);
    dev.expect_matches(d, x, 0, 0, "all_reduce on one rank");
    comm->all_reduce_async(d, op)->wait();
    dev.expect_matches(d, x, 0, 0, "all_reduce_async on one rank");
  }
  const TensorView in = dev.upload(x), out = dev.poisoned(DType::f32, {1000});
  comm->all_gather(out, in);
  dev.expect_matches(out, x, 0, 0, "all_gather");
  const TensorView scattered = dev.poisoned(DType::f32, {1000});
  comm->reduce_scatter_async(scattered, in, ReduceOp::sum)->wait();
  dev.expect_matches(scattered, x, 0, 0, "reduce_scatter");
  const TensorView moved = dev.poisoned(DType::f32, {1000});
  const int64_t counts[] = {1000};
  comm->all_to_all_v(moved, counts, in, counts);
  dev.expect_matches(moved, x, 0, 0, "all_to_all_v");
  comm->broadcast(in, 0);
  dev.expect_matches(in, x, 0, 0, "broadcast");
  // A message to self, staged through host memory, received after it was sent.
  const TensorView received = dev.poisoned(DType::f32, {1000});
  auto r = comm->recv_async(received, 0, 7);
  comm->send(in, 0, 7);
  r->wait();
  dev.expect_matches(received, x, 0, 0, "message to self");
  // Host tensors go to the host communicator; split makes another NCCL communicator.
  double host_value = 3.0;
  comm->all_reduce(TensorView(&host_value, DType::f64, {1}), ReduceOp::sum);
  EXPECT_EQ(host_value, 3.0);
  auto sub = comm->split(0, 0);
  const TensorView again = dev.upload(x);
  sub->all_reduce(again, ReduceOp::sum);
  dev.expect_matches(again, x, 0, 0, "all_reduce on a split communicator");
#endif
}

}  // namespace
}  // namespace mt::test
