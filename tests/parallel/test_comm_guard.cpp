// The MPI communicator on guard tensors (backend/guard.h, comm/host_access.h): every collective and
// message, blocking and non-blocking (whose host copies go back to the tensor on wait()), gives
// what it gives on host tensors, and leaves the guard closed.
#include <vector>

#include "backend/arena.h"
#include "backend/guard.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

float value(int r, int64_t i) { return static_cast<float>(r + 1) * 0.5f + static_cast<float>(i % 7); }

// Guard tensors filled from, and read back into, host vectors (through the backend's copies).
class GuardTensors {
 public:
  GuardTensors() : arena_(guard_backend(), MemCategory::comm, 1 << 20, nullptr) {}
  TensorView make(const std::vector<float>& host) {
    const TensorView t = arena_.alloc(DType::f32, {static_cast<int64_t>(host.size())});
    guard_backend().copy_from_host(t.data, host.data(), t.bytes());
    return t;
  }
  static std::vector<float> read(const TensorView& t) {
    std::vector<float> host(static_cast<size_t>(t.numel()));
    guard_backend().copy_to_host(host.data(), t.data, t.bytes());
    return host;
  }

 private:
  Arena arena_;
};

std::vector<float> values(int r, int64_t n, int64_t first = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, first + i);
  return v;
}

TEST(CommGuard, CollectivesOnGuardTensorsEqualTheHostResults) {
  Communicator& w = world();
  const int n = w.size(), me = w.rank();
  const int64_t part = 13;
  GuardTensors g;
  // all_reduce, blocking and non-blocking, sum and avg.
  const TensorView sum = g.make(values(me, part)), avg = g.make(values(me, part));
  w.all_reduce(sum, ReduceOp::sum);
  w.all_reduce_async(avg, ReduceOp::avg)->wait();
  std::vector<float> want(static_cast<size_t>(part), 0.0f);
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < part; ++i) want[static_cast<size_t>(i)] += value(r, i);
  const std::vector<float> got_sum = GuardTensors::read(sum), got_avg = GuardTensors::read(avg);
  for (int64_t i = 0; i < part; ++i) {
    EXPECT_FLOAT_EQ(got_sum[i], want[i]) << i;
    EXPECT_FLOAT_EQ(got_avg[i], want[i] / n) << i;
  }
  // all_gather: blocking, non-blocking, and non-blocking in place.
  const TensorView mine = g.make(values(me, part));
  const TensorView all = g.make(std::vector<float>(part * n, -1.0f)), all2 = g.make(std::vector<float>(part * n, -1.0f));
  const TensorView in_place = g.make(std::vector<float>(part * n, -1.0f));
  guard_backend().copy(in_place.rows(me * part, part).data, mine.data, mine.bytes());
  w.all_gather(all, mine);
  w.all_gather_async(all2, mine)->wait();
  w.all_gather_async(in_place, in_place.rows(me * part, part))->wait();
  for (const TensorView& t : {all, all2, in_place}) {
    const std::vector<float> got = GuardTensors::read(t);
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < part; ++i) EXPECT_EQ(got[r * part + i], value(r, i)) << "rank " << r << " " << i;
  }
  // reduce_scatter, blocking sum and non-blocking avg.
  const TensorView whole = g.make(values(me, part * n)), out = g.make(std::vector<float>(part)),
                   out2 = g.make(std::vector<float>(part));
  w.reduce_scatter(out, whole, ReduceOp::sum);
  w.reduce_scatter_async(out2, whole, ReduceOp::avg)->wait();
  const std::vector<float> got_out = GuardTensors::read(out), got_out2 = GuardTensors::read(out2);
  for (int64_t i = 0; i < part; ++i) {
    float s = 0.0f;
    for (int r = 0; r < n; ++r) s += value(r, me * part + i);
    EXPECT_FLOAT_EQ(got_out[i], s) << i;
    EXPECT_FLOAT_EQ(got_out2[i], s / n) << i;
  }
  // broadcast from the last rank; all_to_all_v of one element to each rank.
  const TensorView b = g.make(values(me, part));
  w.broadcast(b, n - 1);
  EXPECT_EQ(GuardTensors::read(b), values(n - 1, part));
  const TensorView send = g.make(values(me, n)), recv = g.make(std::vector<float>(n));
  const std::vector<int64_t> ones(static_cast<size_t>(n), 1);
  w.all_to_all_v(recv, ones, send, ones);
  const std::vector<float> got_recv = GuardTensors::read(recv);
  for (int r = 0; r < n; ++r) EXPECT_EQ(got_recv[r], value(r, me)) << "from rank " << r;
}

TEST(CommGuard, MessagesOnGuardTensorsArrive) {
  Communicator& w = world();
  const int n = w.size(), r = w.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t len = 20000;  // past the eager limits: a send waits for its receive
  GuardTensors g;
  const TensorView out = g.make(values(r, len)), in = g.make(std::vector<float>(len));
  if (r % 2 == 0) {
    w.send(out, next, 3);
    w.recv(in, prev, 3);
  } else {
    w.recv(in, prev, 3);
    w.send(out, next, 3);
  }
  EXPECT_EQ(GuardTensors::read(in), values(prev, len));
  const TensorView out2 = g.make(values(r, len, 5)), in2 = g.make(std::vector<float>(len));
  std::unique_ptr<CommRequest> received = w.recv_async(in2, prev, 4);
  std::unique_ptr<CommRequest> sent = w.send_async(out2, next, 4);
  sent->wait();
  received->wait();
  EXPECT_EQ(GuardTensors::read(in2), values(prev, len, 5));
  // To self: the loopback, a receive posted before its send.
  const TensorView self_in = g.make(std::vector<float>(7));
  std::unique_ptr<CommRequest> posted = w.recv_async(self_in, r, 9);
  w.send(g.make(values(r, 7, 2)), r, 9);
  posted->wait();
  EXPECT_EQ(GuardTensors::read(self_in), values(r, 7, 2));
}

}  // namespace
}  // namespace mt::test
