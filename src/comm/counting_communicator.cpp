#include "comm/counting_communicator.h"

#include <cstdlib>

namespace mt {

double CommTotals::sent_bytes(int size) const {
  const double others = size > 1 ? static_cast<double>(size - 1) / size : 0.0;
  return 2.0 * others * static_cast<double>(all_reduce.bytes) +
         others * static_cast<double>(all_gather.bytes + reduce_scatter.bytes + broadcast.bytes) +
         static_cast<double>(send.bytes + all_to_all_v.bytes);
}

CommTotals CommTotals::operator-(const CommTotals& e) const {
  auto minus = [](Kind a, Kind b) { return Kind{a.calls - b.calls, a.bytes - b.bytes}; };
  return {minus(all_reduce, e.all_reduce), minus(all_gather, e.all_gather), minus(reduce_scatter, e.reduce_scatter),
          minus(broadcast, e.broadcast),   minus(send, e.send),             minus(recv, e.recv),
          minus(all_to_all_v, e.all_to_all_v)};
}

CommTotals CommTotals::operator+(const CommTotals& o) const {
  auto plus = [](Kind a, Kind b) { return Kind{a.calls + b.calls, a.bytes + b.bytes}; };
  return {plus(all_reduce, o.all_reduce), plus(all_gather, o.all_gather), plus(reduce_scatter, o.reduce_scatter),
          plus(broadcast, o.broadcast),   plus(send, o.send),             plus(recv, o.recv),
          plus(all_to_all_v, o.all_to_all_v)};
}

void CountingCommunicator::count(CommTotals::Kind& kind, const char* name, size_t bytes) {
  kind.calls += 1;
  kind.bytes += bytes;
  if (keep_records_) records_.push_back({name, bytes});
}

void CountingCommunicator::all_reduce(const TensorView& t, ReduceOp op) {
  count(totals_.all_reduce, "all_reduce", t.bytes());
  inner_.all_reduce(t, op);
}
void CountingCommunicator::all_gather(const TensorView& out, const TensorView& in) {
  count(totals_.all_gather, "all_gather", out.bytes());
  inner_.all_gather(out, in);
}
void CountingCommunicator::reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) {
  count(totals_.reduce_scatter, "reduce_scatter", in.bytes());
  inner_.reduce_scatter(out, in, op);
}
void CountingCommunicator::broadcast(const TensorView& t, int root) {
  count(totals_.broadcast, "broadcast", t.bytes());
  inner_.broadcast(t, root);
}
void CountingCommunicator::all_to_all_v(const TensorView& out, std::span<const int64_t> recv_counts,
                                        const TensorView& in, std::span<const int64_t> send_counts) {
  // Checked first: the bytes below read send_counts[rank()].
  check_all_to_all_args(out, recv_counts, in, send_counts, size(), "all_to_all_v");
  int64_t to_others = 0;
  for (int r = 0; r < size(); ++r)
    if (r != rank()) to_others += send_counts[r];
  count(totals_.all_to_all_v, "all_to_all_v", static_cast<size_t>(to_others) * dtype_size(in.dtype));
  inner_.all_to_all_v(out, recv_counts, in, send_counts);
}
std::unique_ptr<CommRequest> CountingCommunicator::all_reduce_async(const TensorView& t, ReduceOp op) {
  count(totals_.all_reduce, "all_reduce", t.bytes());
  return inner_.all_reduce_async(t, op);
}
std::unique_ptr<CommRequest> CountingCommunicator::all_gather_async(const TensorView& out, const TensorView& in) {
  count(totals_.all_gather, "all_gather", out.bytes());
  return inner_.all_gather_async(out, in);
}
std::unique_ptr<CommRequest> CountingCommunicator::reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                                        ReduceOp op) {
  count(totals_.reduce_scatter, "reduce_scatter", in.bytes());
  return inner_.reduce_scatter_async(out, in, op);
}

void CountingCommunicator::send(const TensorView& t, int dst, int tag) {
  count(totals_.send, "send", t.bytes());
  inner_.send(t, dst, tag);
}
void CountingCommunicator::recv(const TensorView& t, int src, int tag) {
  count(totals_.recv, "recv", t.bytes());
  inner_.recv(t, src, tag);
}
std::unique_ptr<CommRequest> CountingCommunicator::send_async(const TensorView& t, int dst, int tag) {
  count(totals_.send, "send", t.bytes());
  return inner_.send_async(t, dst, tag);
}
std::unique_ptr<CommRequest> CountingCommunicator::recv_async(const TensorView& t, int src, int tag) {
  count(totals_.recv, "recv", t.bytes());
  return inner_.recv_async(t, src, tag);
}

void CountingCommunicator::abort(int code) {
  inner_.abort(code);
  std::_Exit(code);  // not reached: the inner abort ends the process
}

}  // namespace mt
