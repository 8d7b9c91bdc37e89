#include "comm/counting_communicator.h"

#include <cstdlib>

namespace mt {

void CountingCommunicator::all_reduce(const TensorView& t, ReduceOp op) {
  records_.push_back({"all_reduce", t.bytes()});
  inner_.all_reduce(t, op);
}
void CountingCommunicator::all_gather(const TensorView& out, const TensorView& in) {
  records_.push_back({"all_gather", out.bytes()});
  inner_.all_gather(out, in);
}
void CountingCommunicator::reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) {
  records_.push_back({"reduce_scatter", in.bytes()});
  inner_.reduce_scatter(out, in, op);
}
void CountingCommunicator::broadcast(const TensorView& t, int root) {
  records_.push_back({"broadcast", t.bytes()});
  inner_.broadcast(t, root);
}
std::unique_ptr<CommRequest> CountingCommunicator::all_reduce_async(const TensorView& t, ReduceOp op) {
  records_.push_back({"all_reduce", t.bytes()});
  return inner_.all_reduce_async(t, op);
}
std::unique_ptr<CommRequest> CountingCommunicator::all_gather_async(const TensorView& out, const TensorView& in) {
  records_.push_back({"all_gather", out.bytes()});
  return inner_.all_gather_async(out, in);
}
std::unique_ptr<CommRequest> CountingCommunicator::reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                                        ReduceOp op) {
  records_.push_back({"reduce_scatter", in.bytes()});
  return inner_.reduce_scatter_async(out, in, op);
}

void CountingCommunicator::send(const TensorView& t, int dst, int tag) {
  records_.push_back({"send", t.bytes()});
  inner_.send(t, dst, tag);
}
void CountingCommunicator::recv(const TensorView& t, int src, int tag) {
  records_.push_back({"recv", t.bytes()});
  inner_.recv(t, src, tag);
}
std::unique_ptr<CommRequest> CountingCommunicator::send_async(const TensorView& t, int dst, int tag) {
  records_.push_back({"send", t.bytes()});
  return inner_.send_async(t, dst, tag);
}
std::unique_ptr<CommRequest> CountingCommunicator::recv_async(const TensorView& t, int src, int tag) {
  records_.push_back({"recv", t.bytes()});
  return inner_.recv_async(t, src, tag);
}

void CountingCommunicator::abort(int code) {
  inner_.abort(code);
  std::_Exit(code);  // not reached: the inner abort ends the process
}

}  // namespace mt
