// Owns CountingCommunicator: a Communicator that forwards to another and records every collective
// (kind and bytes of the full tensor it moves), so tests can check a layer's communication against
// Megatron's figures.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mt {

struct CollectiveRecord {
  std::string kind;  // "all_reduce", "all_gather", "reduce_scatter", "broadcast"
  size_t bytes = 0;  // all_reduce/broadcast: the tensor; all_gather: the output; reduce_scatter: the input
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
  // Sub-communicators are not counted.
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }
  [[noreturn]] void abort(int code) override;

 private:
  Communicator& inner_;
  std::vector<CollectiveRecord> records_;
};

}  // namespace mt
