// Owns CountingCommunicator: a Communicator that forwards to another and counts every collective and
// point-to-point message (kind and bytes of the full tensor it moves), so tests can check a layer's or
// a schedule's communication against Megatron's figures and the trainer can log its volume.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mt {

struct CollectiveRecord {
  // "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all_v", "send", "recv"
  std::string kind;
  // all_reduce/broadcast/send/recv: the tensor; all_gather: the output; reduce_scatter: the input;
  // all_to_all_v: what this rank sends to the other ranks (its chunk to itself stays in memory).
  size_t bytes = 0;
};

// Calls and bytes (as in CollectiveRecord) of each kind.
struct CommTotals {
  struct Kind {
    size_t calls = 0, bytes = 0;
  };
  Kind all_reduce, all_gather, reduce_scatter, broadcast, send, recv, all_to_all_v;

  // Bytes this rank puts on the wire over a group of `size` ranks with ring algorithms (the
  // convention of NCCL's bus bandwidth): an all-reduce of N bytes sends 2(size-1)/size·N, an
  // all-gather or reduce-scatter of N bytes (the whole) (size-1)/size·N, a send N; a broadcast
  // counts (size-1)/size·N (pipelined ring). Receives send nothing. An all_to_all_v counts what it
  // recorded: the bytes sent to the other ranks, which is (size-1)/size of the whole when the counts
  // are even, as for an all-gather.
  double sent_bytes(int size) const;
  CommTotals operator-(const CommTotals& earlier) const;
  CommTotals operator+(const CommTotals& other) const;
};

class CountingCommunicator final : public Communicator {
 public:
  // Forwards to `inner`; keep_records: also keep one record per call (tests); the totals are
  // always kept.
  explicit CountingCommunicator(Communicator& inner, bool keep_records = true)
      : inner_(inner), keep_records_(keep_records) {}
  // Owns its inner communicator (the trainer's counted groups).
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner, bool keep_records = false)
      : owned_(std::move(inner)), inner_(*owned_), keep_records_(keep_records) {}
  const std::vector<CollectiveRecord>& records() const { return records_; }
  const CommTotals& totals() const { return totals_; }
  void clear() {
    records_.clear();
    totals_ = {};
  }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce(const TensorView& t, ReduceOp op) override;
  void all_gather(const TensorView& out, const TensorView& in) override;
  void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override;
  void broadcast(const TensorView& t, int root) override;
  void barrier() override { inner_.barrier(); }
  void all_to_all_v(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                    std::span<const int64_t> send_counts) override;
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
  void count(CommTotals::Kind& kind, const char* name, size_t bytes);

  std::unique_ptr<Communicator> owned_;
  Communicator& inner_;
  bool keep_records_;
  std::vector<CollectiveRecord> records_;
  CommTotals totals_;
};

}  // namespace mt
