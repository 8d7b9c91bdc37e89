// The size-1 communicator's point-to-point messages (the loopback every communicator uses for
// messages to self): copies matched by tag in send order, receives posted before their send, errors
// instead of hangs, size and argument checks; all_to_all_v as a checked copy; the same on guard
// tensors (copies inside a window, which closes again); and the counting wrapper's send/recv and
// all_to_all_v records.
#include <cstring>
#include <memory>
#include <vector>

#include "backend/arena.h"
#include "backend/guard.h"
#include "comm/communicator.h"
#include "comm/counting_communicator.h"
#include "testing.h"

namespace mt::test {
namespace {

HostTensor filled(int64_t n, float first) {
  HostTensor t(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = first + static_cast<float>(i);
  return t;
}

void expect_filled(HostTensor& t, float first, const char* what) {
  for (int64_t i = 0; i < t.numel(); ++i)
    EXPECT_EQ(t.f32()[i], first + static_cast<float>(i)) << what << " [" << i << "]";
}

TEST(SelfCommunicator, LoopbackCopiesAndMatchesByTagInSendOrder) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor a = filled(5, 10.0f), b = filled(3, 20.0f), a2 = filled(5, 30.0f);
  c->send(a.view(), 0, 1);
  c->send(b.view(), 0, 2);
  c->send_async(a2.view(), 0, 1)->wait();
  a.f32()[0] = b.f32()[0] = a2.f32()[0] = -1.0f;  // the sends copied: later writes do not travel
  HostTensor got_b(DType::f32, {3}), first(DType::f32, {5}), second(DType::f32, {5});
  c->recv(got_b.view(), 0, 2);  // tag 2 before tag 1: matched by tag, not by arrival
  c->recv(first.view(), 0, 1);
  c->recv_async(second.view(), 0, 1)->wait();
  expect_filled(got_b, 20.0f, "tag 2");
  expect_filled(first, 10.0f, "first tag-1 message");
  expect_filled(second, 30.0f, "second tag-1 message");
  // Everything was taken: the queue is empty again.
  EXPECT_THROW(c->recv(first.view(), 0, 1), Error);
}

TEST(SelfCommunicator, ReceivesPostedBeforeTheirSendsAreFilledInPostingOrder) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor x(DType::f32, {4}), y(DType::f32, {4}), z(DType::f32, {2});
  std::unique_ptr<CommRequest> rx = c->recv_async(x.view(), 0, 7);
  std::unique_ptr<CommRequest> ry = c->recv_async(y.view(), 0, 7);
  std::unique_ptr<CommRequest> rz = c->recv_async(z.view(), 0, 8);
  HostTensor m1 = filled(4, 1.0f), m2 = filled(4, 5.0f), m3 = filled(2, 9.0f);
  c->send(m3.view(), 0, 8);
  c->send_async(m1.view(), 0, 7)->wait();
  c->send(m2.view(), 0, 7);
  ry->wait();
  rx->wait();
  rz->wait();
  expect_filled(x, 1.0f, "first posted");
  expect_filled(y, 5.0f, "second posted");
  expect_filled(z, 9.0f, "tag 8");
}

TEST(SelfCommunicator, ReceiveWithNoMatchingSendIsAnErrorNotAHang) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor t(DType::f32, {4}), m = filled(4, 2.0f);
  expect_error_mentioning([&] { c->recv(t.view(), 0, 3); },
                          "recv from self (rank 0) tag 3 into f32[4]: no message with this tag was sent to self");
  c->send(m.view(), 0, 4);  // another tag does not match
  expect_error_mentioning([&] { c->recv(t.view(), 0, 3); }, "tag 3");
  std::unique_ptr<CommRequest> pending = c->recv_async(t.view(), 0, 3);
  expect_error_mentioning([&] { pending->wait(); },
                          "recv_async from self (rank 0) tag 3 into f32[4]: no matching send");
  c->recv(t.view(), 0, 4);  // the tag-4 message is still there
  expect_filled(t, 2.0f, "tag 4");
}

TEST(SelfCommunicator, WrongSizeIsAnErrorNamingBothSizes) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor m = filled(4, 3.0f), five(DType::f32, {5}), four(DType::f32, {4});
  c->send(m.view(), 0, 1);
  expect_error_mentioning(
      [&] { c->recv(five.view(), 0, 1); },
      "recv from rank 0 tag 1: the message holds 16 bytes but the receive buffer f32[5] holds 20 bytes");
  c->recv(four.view(), 0, 1);  // the message stayed queued
  expect_filled(four, 3.0f, "after the size error");
  // Same bytes, other dtype: bytes move, so an i32[4] buffer takes an f32[4] message; bf16[4] does not.
  HostTensor as_i32(DType::i32, {4}), as_bf16(DType::bf16, {4});
  c->send(m.view(), 0, 2);
  c->recv(as_i32.view(), 0, 2);
  EXPECT_EQ(std::memcmp(as_i32.bytes.data(), m.bytes.data(), 16), 0);
  // A send that meets a posted receive of another size fails, naming the receive.
  std::unique_ptr<CommRequest> posted = c->recv_async(as_bf16.view(), 0, 3);
  expect_error_mentioning(
      [&] { c->send(m.view(), 0, 3); },
      "recv_async from rank 0 tag 3: the message holds 16 bytes but the receive buffer bf16[4] holds 8 bytes");
}

TEST(SelfCommunicator, MovesEveryDtype) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor u8(DType::u8, {3}), bf(DType::bf16, {2}), i32(DType::i32, {2});
  u8.u8()[0] = 0, u8.u8()[1] = 128, u8.u8()[2] = 255;
  bf.view().bf16()[0] = f32_to_bf16(-1.5f), bf.view().bf16()[1] = 0xffff;
  i32.i32()[0] = -7, i32.i32()[1] = 2147483647;
  c->send(u8.view(), 0, 0);
  c->send(bf.view(), 0, 1);
  c->send(i32.view(), 0, 2);
  HostTensor u8_in(DType::u8, {3}), bf_in(DType::bf16, {2}), i32_in(DType::i32, {2});
  c->recv(i32_in.view(), 0, 2);
  c->recv(bf_in.view(), 0, 1);
  c->recv(u8_in.view(), 0, 0);
  EXPECT_EQ(u8_in.u8()[0], 0);
  EXPECT_EQ(u8_in.u8()[1], 128);
  EXPECT_EQ(u8_in.u8()[2], 255);
  EXPECT_EQ(bf16_to_f32(bf_in.view().bf16()[0]), -1.5f);
  EXPECT_EQ(bf_in.view().bf16()[1], 0xffff);
  EXPECT_EQ(i32_in.i32()[0], -7);
  EXPECT_EQ(i32_in.i32()[1], 2147483647);
}

TEST(SelfCommunicator, BadPeerTagOrDeviceIsAnError) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor t(DType::f32, {2, 3});
  EXPECT_EQ(c->max_tag(), 32767);
  expect_error_mentioning([&] { c->send(t.view(), 1, 0); }, "send: peer rank 1 is out of [0, 1) (tag 0, f32[2, 3])");
  expect_error_mentioning([&] { c->recv_async(t.view(), -1, 0); }, "recv_async: peer rank -1 is out of [0, 1)");
  expect_error_mentioning([&] { c->send_async(t.view(), 0, -1); }, "send_async: tag -1 is out of [0, 32767]");
  expect_error_mentioning([&] { c->recv(t.view(), 0, 32768); }, "recv: tag 32768 is out of [0, 32767]");
  const TensorView on_device(t.bytes.data(), DType::f32, {2, 3}, Device::cuda);
  expect_error_mentioning([&] { c->send(on_device, 0, 0); }, "host tensors only");
  c->send(t.view(), 0, 32767);  // the limit itself is a valid tag
  c->recv(t.view(), 0, 32767);
}

TEST(SelfCommunicator, DestroyedPendingReceiveIsCancelled) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor m = filled(4, 6.0f), got(DType::f32, {4});
  {
    auto gone = std::make_unique<HostTensor>(DType::f32, Shape{4});
    std::unique_ptr<CommRequest> never_waited = c->recv_async(gone->view(), 0, 9);
    never_waited.reset();  // cancelled: a later send must not write into `gone`
  }
  c->send(m.view(), 0, 9);
  c->recv(got.view(), 0, 9);
  expect_filled(got, 6.0f, "after the cancelled receive");
}

TEST(SelfCommunicator, AllToAllVIsACheckedCopy) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  HostTensor in = filled(6, 4.0f), out(DType::f32, {6}), seven(DType::f32, {7});
  const std::vector<int64_t> six{6}, halves{3, 3}, zero{0};
  c->all_to_all_v(out.view(), six, in.view(), six);
  expect_filled(out, 4.0f, "all_to_all_v");
  HostTensor none(DType::f32, {0}), none2(DType::f32, {0});
  c->all_to_all_v(none.view(), zero, none2.view(), zero);
  expect_error_mentioning([&] { c->all_to_all_v(seven.view(), six, in.view(), six); },
                          "all_to_all_v: the receive counts sum to 6 elements but out f32[7] holds 7");
  expect_error_mentioning([&] { c->all_to_all_v(out.view(), six, in.view(), halves); },
                          "all_to_all_v: 2 send counts for a group of 1 ranks");
  expect_error_mentioning([&] { c->all_to_all_v(in.view(), six, in.view(), six); }, "overlap");
  // The counting wrapper records the bytes sent to other ranks: none here.
  CountingCommunicator counting(*c);
  counting.all_to_all_v(out.view(), six, in.view(), six);
  ASSERT_EQ(counting.records().size(), 1u);
  EXPECT_EQ(counting.records()[0].kind, "all_to_all_v");
  EXPECT_EQ(counting.totals().all_to_all_v.calls, 1u);
  EXPECT_EQ(counting.totals().all_to_all_v.bytes, 0u);
}

TEST(CountingCommunicator, RecordsSendsAndReceivesWithTheirBytes) {
  std::unique_ptr<Communicator> self = make_self_communicator();
  CountingCommunicator c(*self);
  HostTensor a = filled(4, 1.0f), b(DType::bf16, {3}), got_a(DType::f32, {4}), got_b(DType::bf16, {3});
  EXPECT_EQ(c.max_tag(), 32767);
  c.send(a.view(), 0, 1);
  c.send_async(b.view(), 0, 2)->wait();
  c.recv_async(got_b.view(), 0, 2)->wait();
  c.recv(got_a.view(), 0, 1);
  expect_filled(got_a, 1.0f, "through the wrapper");
  const std::vector<CollectiveRecord>& r = c.records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].kind, "send");
  EXPECT_EQ(r[0].bytes, 16u);
  EXPECT_EQ(r[1].kind, "send");
  EXPECT_EQ(r[1].bytes, 6u);
  EXPECT_EQ(r[2].kind, "recv");
  EXPECT_EQ(r[2].bytes, 6u);
  EXPECT_EQ(r[3].kind, "recv");
  EXPECT_EQ(r[3].bytes, 16u);
}

// Totals by kind, and the bytes a rank sends under ring algorithms: 2(d-1)/d of an all-reduce,
// (d-1)/d of an all-gather or reduce-scatter (of the whole), every send; receives send nothing.
TEST(CountingCommunicator, TotalsAndRingBytes) {
  std::unique_ptr<Communicator> self = make_self_communicator();
  CountingCommunicator c(*self, /*keep_records=*/false);
  HostTensor a = filled(4, 1.0f), out(DType::f32, {4}), got(DType::f32, {4});
  c.all_reduce(a.view(), ReduceOp::sum);
  c.all_reduce_async(a.view(), ReduceOp::avg)->wait();
  c.all_gather(out.view(), a.view());
  c.send(a.view(), 0, 3);
  c.recv(got.view(), 0, 3);
  EXPECT_TRUE(c.records().empty());
  const CommTotals t = c.totals();
  EXPECT_EQ(t.all_reduce.calls, 2u);
  EXPECT_EQ(t.all_reduce.bytes, 32u);
  EXPECT_EQ(t.all_gather.bytes, 16u);
  EXPECT_EQ(t.send.bytes, 16u);
  EXPECT_EQ(t.recv.bytes, 16u);
  EXPECT_DOUBLE_EQ(t.sent_bytes(4), 2.0 * 0.75 * 32 + 0.75 * 16 + 16);
  EXPECT_DOUBLE_EQ(t.sent_bytes(1), 16.0);  // collectives over one rank move nothing
  const CommTotals later = c.totals();
  c.all_reduce(a.view(), ReduceOp::sum);
  EXPECT_EQ((c.totals() - later).all_reduce.bytes, 16u);
  c.clear();
  EXPECT_EQ(c.totals().all_reduce.calls, 0u);
}

// Guard tensors (backend/guard.h) move like host tensors, and the guard is closed afterwards.
TEST(SelfCommunicator, GuardTensorsMoveLikeHostTensors) {
  std::unique_ptr<Communicator> c = make_self_communicator();
  Arena arena(guard_backend(), MemCategory::comm, 1 << 16, nullptr);
  const auto guard_filled = [&](int64_t n, float first) {
    HostTensor h = filled(n, first);
    const TensorView t = arena.alloc(DType::f32, {n});
    guard_backend().copy_from_host(t.data, h.bytes.data(), t.bytes());
    return t;
  };
  const auto expect_guard_filled = [&](const TensorView& t, float first, const char* what) {
    HostTensor h(DType::f32, t.shape);
    guard_backend().copy_to_host(h.bytes.data(), t.data, t.bytes());
    expect_filled(h, first, what);
  };
  const TensorView a = guard_filled(6, 1.0f), gathered = guard_filled(6, 0.0f), scattered = guard_filled(6, 0.0f),
                   exchanged = guard_filled(6, 0.0f), received = guard_filled(6, 0.0f),
                   posted = guard_filled(6, 0.0f);
  c->all_reduce(a, ReduceOp::avg);
  c->all_gather(gathered, a);
  c->reduce_scatter_async(scattered, a, ReduceOp::sum)->wait();
  const std::vector<int64_t> six = {6};
  c->all_to_all_v(exchanged, six, a, six);
  c->send(a, 0, 1);
  c->recv(received, 0, 1);
  std::unique_ptr<CommRequest> later = c->recv_async(posted, 0, 2);
  c->send_async(a, 0, 2)->wait();
  later->wait();
  for (const TensorView& t : {a, gathered, scattered, exchanged, received, posted}) expect_guard_filled(t, 1.0f, "copy");
  EXPECT_DEATH({ volatile float x = *a.f32(); (void)x; }, "");
}

}  // namespace
}  // namespace mt::test
