// Owns CountingCommunicator: a Communicator that forwards to another and records every collective and
// point-to-point message (kind and bytes of the full tensor it moves), so tests can check a layer's or
// a schedule's communication against Megatron's figures.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mt {

struct CollectiveRecord {
  std::string kind;  // "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv"
  size_t bytes = 0;  // all_reduce/broadcast/send/recv: the tensor; all_gather: the output; reduce_scatter: the input
};

class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  const std::vector<CollectiveRecord>& records() const { return records_; }
  void clear() { records_.clear(); }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce(const TensorView& t, ReduceOp op) override;
  void all_gather(const TensorView& out, const TensorView& in) override;
  void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override;
  void broadcast(const TensorView& t, int root) override;
  void barrier() override { inner_.barrier(); }
  std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) override;
  std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) override;
  std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in, ReduceOp op) override;
  // Blocking and non-blocking messages record alike ("send" / "recv"), self-messages included.
  int max_tag() const override { return inner_.max_tag(); }
  void send(const TensorView& t, int dst, int tag) override;
  void recv(const TensorView& t, int src, int tag) override;
  std::unique_ptr<CommRequest> send_async(const TensorView& t, int dst, int tag) override;
  std::unique_ptr<CommRequest> recv_async(const TensorView& t, int src, int tag) override;
  // Sub-communicators are not counted.
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }
  [[noreturn]] void abort(int code) override;

 private:
  Communicator& inner_;
  std::vector<CollectiveRecord> records_;
};

}  // namespace mt
