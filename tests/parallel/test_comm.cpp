// The MPI communicator against values every rank can compute itself: blocking and non-blocking
// all-reduce (sum, max), all-gather, reduce-scatter, broadcast, all-to-all with uneven counts
// (and its count in the counting wrapper), split into sub-groups, and the
// point-to-point messages of the pipeline (ring exchange, tag matching, every dtype, 1F1B's order,
// loopback to self, wrong sizes).
#include <climits>
#include <string>
#include <vector>

#include "comm/counting_communicator.h"
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

// ReduceOp::avg (--ddp-average-in-collective): the sum over ranks divided by their number, blocking
// and non-blocking, all-reduce and reduce-scatter; integers cannot be averaged.
TEST(Comm, AverageIsTheSumOverTheGroupSize) {
  Communicator& w = world();
  const int n = w.size();
  const int64_t part = 17;
  HostTensor a(DType::f32, {part * n}), b(DType::f32, {part * n}), out(DType::f32, {part}), out2(DType::f32, {part});
  for (int64_t i = 0; i < part * n; ++i) a.f32()[i] = b.f32()[i] = value(w.rank(), i);
  w.reduce_scatter(out.view(), a.view(), ReduceOp::avg);
  w.reduce_scatter_async(out2.view(), b.view(), ReduceOp::avg)->wait();
  w.all_reduce(a.view(), ReduceOp::avg);
  w.all_reduce_async(b.view(), ReduceOp::avg)->wait();
  for (int64_t i = 0; i < part * n; ++i) {
    float sum = 0.0f;
    for (int r = 0; r < n; ++r) sum += value(r, i);
    EXPECT_FLOAT_EQ(a.f32()[i], sum / n) << i;
    EXPECT_FLOAT_EQ(b.f32()[i], sum / n) << i;
    if (i / part == w.rank()) {
      EXPECT_FLOAT_EQ(out.f32()[i % part], sum / n) << i;
      EXPECT_FLOAT_EQ(out2.f32()[i % part], sum / n) << i;
    }
  }
  HostTensor k(DType::i32, {4});
  EXPECT_THROW(w.all_reduce(k.view(), ReduceOp::avg), Error);
}

// The distributed optimizer gathers each rank's updated shard in place: the input is this rank's
// part of the output. Any other overlap is refused.
TEST(Comm, AllGatherInPlace) {
  Communicator& w = world();
  const int n = w.size();
  const int64_t part = 9;
  HostTensor all(DType::f32, {part * n}), all2(DType::f32, {part * n});
  for (int64_t i = 0; i < part * n; ++i) all.f32()[i] = all2.f32()[i] = -1.0f;
  for (int64_t i = 0; i < part; ++i) all.f32()[w.rank() * part + i] = all2.f32()[w.rank() * part + i] = value(w.rank(), i);
  w.all_gather(all.view(), all.view().rows(w.rank() * part, part));
  w.all_gather_async(all2.view(), all2.view().rows(w.rank() * part, part))->wait();
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < part; ++i) {
      EXPECT_EQ(all.f32()[r * part + i], value(r, i));
      EXPECT_EQ(all2.f32()[r * part + i], value(r, i));
    }
  const int other = (w.rank() + 1) % n;
  EXPECT_THROW(w.all_gather(all.view(), all.view().rows(other * part, part)), Error);
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

// all_to_all_v with uneven counts, zeros among them (a rank sends nothing to some ranks, and to itself
// at times), for a 4-byte and a 1-byte dtype; the counting wrapper records what went to other ranks.
int64_t a2a_count(int from, int to) { return (from * 3 + to * 5 + 1) % 4 * (from + 1); }
float a2a_value(int from, int to, int64_t i) {
  return static_cast<float>(from * 1000 + to * 100) + static_cast<float>(i);
}

TEST(Comm, AllToAllVMovesUnevenChunksInRankOrder) {
  Communicator& w = world();
  const int n = w.size(), r = w.rank();
  std::vector<int64_t> send(n), recv(n);
  int64_t send_total = 0, recv_total = 0, empty_chunks = 0;
  for (int q = 0; q < n; ++q) {
    send[q] = a2a_count(r, q), recv[q] = a2a_count(q, r);
    send_total += send[q], recv_total += recv[q];
    for (int p = 0; p < n; ++p) empty_chunks += a2a_count(p, q) == 0;
  }
  EXPECT_GT(empty_chunks, 0) << "the pattern must send some empty chunks";
  HostTensor in(DType::f32, {send_total}), out(DType::f32, {recv_total});
  HostTensor in_u8(DType::u8, {send_total}), out_u8(DType::u8, {recv_total});
  for (int q = 0, at = 0; q < n; ++q)
    for (int64_t i = 0; i < send[q]; ++i, ++at) {
      in.f32()[at] = a2a_value(r, q, i);
      in_u8.u8()[at] = static_cast<uint8_t>(a2a_value(r, q, i));
    }
  CountingCommunicator counting(w);
  counting.all_to_all_v(out.view(), recv, in.view(), send);
  w.all_to_all_v(out_u8.view(), recv, in_u8.view(), send);
  int64_t wrong = 0, wrong_u8 = 0;
  for (int q = 0, at = 0; q < n; ++q)
    for (int64_t i = 0; i < recv[q]; ++i, ++at) {
      wrong += out.f32()[at] != a2a_value(q, r, i);
      wrong_u8 += out_u8.u8()[at] != static_cast<uint8_t>(a2a_value(q, r, i));
    }
  EXPECT_EQ(wrong, 0) << "f32 elements out of place";
  EXPECT_EQ(wrong_u8, 0) << "u8 elements out of place";
  ASSERT_EQ(counting.records().size(), 1u);
  EXPECT_EQ(counting.records()[0].kind, "all_to_all_v");
  EXPECT_EQ(counting.totals().all_to_all_v.bytes, static_cast<size_t>(send_total - send[r]) * 4);
  EXPECT_DOUBLE_EQ(counting.totals().sent_bytes(n), static_cast<double>((send_total - send[r]) * 4));
}

TEST(Comm, AllToAllVArgumentsAreCheckedBeforeCommunicating) {
  Communicator& w = world();
  const int n = w.size();
  std::vector<int64_t> ones(n, 1), short_list(n - 1, 1);
  HostTensor a(DType::f32, {n}), b(DType::f32, {n}), c(DType::f32, {n + 1}), i(DType::i32, {n});
  expect_error_mentioning([&] { w.all_to_all_v(c.view(), ones, a.view(), ones); },
                          "the receive counts sum to " + std::to_string(n) + " elements but out f32[" +
                              std::to_string(n + 1) + "]");
  expect_error_mentioning([&] { w.all_to_all_v(b.view(), ones, c.view(), ones); }, "the send counts sum to");
  expect_error_mentioning([&] { w.all_to_all_v(b.view(), ones, a.view(), short_list); },
                          std::to_string(n - 1) + " send counts for a group of " + std::to_string(n));
  expect_error_mentioning([&] { w.all_to_all_v(i.view(), ones, a.view(), ones); }, "dtypes differ");
  expect_error_mentioning([&] { w.all_to_all_v(a.view(), ones, a.view(), ones); }, "overlap");
  std::vector<int64_t> negative = ones;
  negative[0] = -1, negative[n - 1] += 1;
  expect_error_mentioning([&] { w.all_to_all_v(b.view(), ones, a.view(), negative); }, "send count for rank 0 is -1");
  w.all_to_all_v(b.view(), ones, a.view(), ones);  // every rank is still in step
}

// Element i of the message `from` sends with `tag`: every (sender, tag, element) differs, exactly in f32.
float message_value(int from, int tag, int64_t i) {
  return static_cast<float>(from * 1000000 + tag * 1000 + static_cast<int>(i % 997));
}

HostTensor message(int from, int tag, int64_t len) {
  HostTensor t(DType::f32, {len});
  for (int64_t i = 0; i < len; ++i) t.f32()[i] = message_value(from, tag, i);
  return t;
}

void expect_message(HostTensor& got, int from, int tag) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < got.numel(); ++i) wrong += got.f32()[i] != message_value(from, tag, i);
  EXPECT_EQ(wrong, 0) << "elements that differ from the message of rank " << from << " tag " << tag;
}

// 80 KB: past Open MPI's eager limits, so a send waits for its receive and a wrong order would hang.
constexpr int64_t kLong = 20000;

TEST(Comm, RingExchangeBlockingAndAsync) {
  Communicator& w = world();
  const int n = w.size(), r = w.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  HostTensor out = message(r, 5, kLong), in(DType::f32, {kLong});
  // Blocking: even ranks send first, odd ranks receive first, so every send meets a posted receive.
  if (r % 2 == 0) {
    w.send(out.view(), next, 5);
    w.recv(in.view(), prev, 5);
  } else {
    w.recv(in.view(), prev, 5);
    w.send(out.view(), next, 5);
  }
  expect_message(in, prev, 5);
  // Non-blocking: everyone sends at once; the receives are posted first.
  HostTensor out2 = message(r, 6, kLong), in2(DType::f32, {kLong});
  std::unique_ptr<CommRequest> received = w.recv_async(in2.view(), prev, 6);
  std::unique_ptr<CommRequest> sent = w.send_async(out2.view(), next, 6);
  sent->wait();
  received->wait();
  expect_message(in2, prev, 6);
}

TEST(Comm, TaggedMessagesInFlightMatchByTag) {
  Communicator& w = world();
  const int r = w.rank();
  // Pairs (0, 1), (2, 3), ...: the even rank sends tags 20..23 and then a second tag-20 message; the odd
  // rank receives them in the opposite order of the tags, and the two tag-20 messages in send order.
  const int64_t len[4] = {kLong, 7, 3000, kLong + 1};  // by tag - 20
  if (r % 2 == 0 && r + 1 < w.size()) {
    std::vector<HostTensor> out;
    for (int k = 0; k < 4; ++k) out.push_back(message(r, 20 + k, len[k]));
    out.push_back(message(r, 120, len[0]));  // same tag 20, other values
    std::vector<std::unique_ptr<CommRequest>> sent;
    for (int k = 0; k < 4; ++k) sent.push_back(w.send_async(out[k].view(), r + 1, 20 + k));
    sent.push_back(w.send_async(out[4].view(), r + 1, 20));
    for (auto& s : sent) s->wait();
  } else if (r % 2 == 1) {
    const int from = r - 1;
    HostTensor in23(DType::f32, {len[3]}), in22(DType::f32, {len[2]}), in21(DType::f32, {len[1]});
    HostTensor first20(DType::f32, {len[0]}), second20(DType::f32, {len[0]});
    w.recv(in23.view(), from, 23);
    w.recv(in22.view(), from, 22);
    std::unique_ptr<CommRequest> a = w.recv_async(in21.view(), from, 21);
    std::unique_ptr<CommRequest> b = w.recv_async(first20.view(), from, 20);
    std::unique_ptr<CommRequest> c = w.recv_async(second20.view(), from, 20);
    c->wait();
    b->wait();
    a->wait();
    expect_message(in23, from, 23);
    expect_message(in22, from, 22);
    expect_message(in21, from, 21);
    expect_message(first20, from, 20);
    expect_message(second20, from, 120);
  }
}

TEST(Comm, MessagesMoveEveryDtypeExactly) {
  Communicator& w = world();
  const int n = w.size(), r = w.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  // Odd lengths, so a byte count computed from the wrong element size would not match.
  const int64_t len = 1001;
  auto f32_at = [](int from, int64_t i) { return -0.37f * static_cast<float>(from + 1) * static_cast<float>(i); };
  auto i32_at = [](int from, int64_t i) { return static_cast<int32_t>(-2000000000 + from * 7919 + i * 104729); };
  auto u8_at = [](int from, int64_t i) { return static_cast<uint8_t>(from * 37 + i * 11); };
  auto bf16_at = [](int from, int64_t i) {
    return f32_to_bf16(1.5f * static_cast<float>(i) - static_cast<float>(from));
  };
  HostTensor out_f32(DType::f32, {len}), out_i32(DType::i32, {len}), out_u8(DType::u8, {len}),
      out_bf16(DType::bf16, {len});
  HostTensor in_f32(DType::f32, {len}), in_i32(DType::i32, {len}), in_u8(DType::u8, {len}),
      in_bf16(DType::bf16, {len});
  for (int64_t i = 0; i < len; ++i) {
    out_f32.f32()[i] = f32_at(r, i);
    out_i32.i32()[i] = i32_at(r, i);
    out_u8.u8()[i] = u8_at(r, i);
    out_bf16.view().bf16()[i] = bf16_at(r, i);
  }
  // All four in flight at once, one tag per dtype.
  std::vector<std::unique_ptr<CommRequest>> requests;
  requests.push_back(w.recv_async(in_f32.view(), prev, 30));
  requests.push_back(w.recv_async(in_i32.view(), prev, 31));
  requests.push_back(w.recv_async(in_u8.view(), prev, 32));
  requests.push_back(w.recv_async(in_bf16.view(), prev, 33));
  requests.push_back(w.send_async(out_bf16.view(), next, 33));
  requests.push_back(w.send_async(out_u8.view(), next, 32));
  requests.push_back(w.send_async(out_i32.view(), next, 31));
  requests.push_back(w.send_async(out_f32.view(), next, 30));
  for (auto& q : requests) q->wait();
  int64_t wrong[4] = {};
  for (int64_t i = 0; i < len; ++i) {
    wrong[0] += in_f32.f32()[i] != f32_at(prev, i);
    wrong[1] += in_i32.i32()[i] != i32_at(prev, i);
    wrong[2] += in_u8.u8()[i] != u8_at(prev, i);
    wrong[3] += in_bf16.view().bf16()[i] != bf16_at(prev, i);
  }
  EXPECT_EQ(wrong[0], 0) << "f32";
  EXPECT_EQ(wrong[1], 0) << "i32";
  EXPECT_EQ(wrong[2], 0) << "u8";
  EXPECT_EQ(wrong[3], 0) << "bf16";
  EXPECT_EQ(in_i32.i32()[len - 1], i32_at(prev, len - 1));  // spot check of a large negative value
}

// The steady state of 1F1B with one stage per rank: every stage posts its receives (activation from
// the previous stage, gradient from the next), then its sends, then waits for all: a stage's
// send_forward_recv_backward meets the next stage's send_backward_recv_forward without deadlock.
TEST(Comm, OneFOneBNeighbourExchangeDoesNotDeadlock) {
  Communicator& w = world();
  const int n = w.size(), r = w.rank();
  const bool first = r == 0, last = r == n - 1;
  for (int micro = 0; micro < 4; ++micro) {
    const int forward_tag = 2 * micro, backward_tag = 2 * micro + 1;
    HostTensor act_in(DType::f32, {kLong}), grad_in(DType::f32, {kLong});
    HostTensor act_out = message(r, forward_tag, kLong), grad_out = message(r, backward_tag, kLong);
    std::vector<std::unique_ptr<CommRequest>> recvs, sends;
    if (!first) recvs.push_back(w.recv_async(act_in.view(), r - 1, forward_tag));
    if (!last) recvs.push_back(w.recv_async(grad_in.view(), r + 1, backward_tag));
    if (!last) sends.push_back(w.send_async(act_out.view(), r + 1, forward_tag));
    if (!first) sends.push_back(w.send_async(grad_out.view(), r - 1, backward_tag));
    for (auto& q : recvs) q->wait();
    for (auto& q : sends) q->wait();
    if (!first) expect_message(act_in, r - 1, forward_tag);
    if (!last) expect_message(grad_in, r + 1, backward_tag);
  }
}

TEST(Comm, MessageToSelfIsALoopback) {
  Communicator& w = world();
  const int r = w.rank();
  HostTensor a = message(r, 50, kLong), b = message(r, 51, 10), got_a(DType::f32, {kLong}), got_b(DType::f32, {10});
  w.send(a.view(), r, 50);  // never blocks: the bytes are copied
  std::unique_ptr<CommRequest> pending = w.send_async(b.view(), r, 51);
  w.recv(got_b.view(), r, 51);
  w.recv_async(got_a.view(), r, 50)->wait();
  pending->wait();
  expect_message(got_a, r, 50);
  expect_message(got_b, r, 51);
  // A receive from self that nothing can fill is an error, not a hang.
  expect_error_mentioning([&] { w.recv(got_b.view(), r, 50); }, "no message with this tag was sent to self");
}

TEST(Comm, PointToPointErrorsAreClear) {
  Communicator& w = world();
  const int n = w.size(), r = w.rank();
  HostTensor t(DType::f32, {4});
  expect_error_mentioning([&] { w.send(t.view(), n, 1); }, "send: peer rank " + std::to_string(n) + " is out of [0, " +
                                                               std::to_string(n) + ")");
  expect_error_mentioning([&] { w.recv_async(t.view(), -1, 1); }, "recv_async: peer rank -1");
  expect_error_mentioning([&] { w.send_async(t.view(), (r + 1) % n, -1); }, "send_async: tag -1 is out of [0, ");
  EXPECT_GE(w.max_tag(), 32767);  // the MPI standard's least MPI_TAG_UB
  if (w.max_tag() < INT_MAX)
    expect_error_mentioning([&] { w.recv(t.view(), (r + 1) % n, w.max_tag() + 1); }, std::to_string(w.max_tag()));
  TensorView device_view(t.bytes.data(), DType::f32, {4}, Device::cuda);
  expect_error_mentioning([&] { w.send(device_view, (r + 1) % n, 1); }, "host tensors only");

  // Wrong sizes between ranks 0 and 1 (small messages: the sends complete without their receives).
  if (n < 2 || r > 1) return;
  if (r == 0) {
    HostTensor four = message(0, 40, 4), six = message(0, 41, 6), three = message(0, 42, 3);
    w.send(four.view(), 1, 40);
    w.send(six.view(), 1, 41);
    w.send(three.view(), 1, 42);
  } else {
    HostTensor five(DType::f32, {5}), four(DType::f32, {4});
    // The blocking receive probes first: the error names both sizes and the message stays queued (if the
    // receive wrongly succeeded, the message is gone and receiving it again would hang).
    if (expect_error_mentioning([&] { w.recv(five.view(), 0, 40); },
                                "the message holds 16 bytes but the receive buffer f32[5] holds 20 bytes")) {
      w.recv(four.view(), 0, 40);
      expect_message(four, 0, 40);
    }
    expect_error_mentioning([&] { w.recv_async(five.view(), 0, 41)->wait(); },
                            "recv_async from rank 0 tag 41: the message is larger than the receive buffer f32[5]");
    expect_error_mentioning([&] { w.recv_async(five.view(), 0, 42)->wait(); }, "the message holds 12 bytes");
  }
}

}  // namespace
}  // namespace mt::test
