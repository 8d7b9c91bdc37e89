#include "comm/communicator.h"

#include <cstdlib>
#include <cstring>

#include "comm/host_access.h"
#include "comm/loopback.h"

namespace mt {

void check_reduce_args(const TensorView& t, const char* op, ReduceOp reduce) {
  MT_CHECK(host_addressable(t)) << op << ": host tensors only (this communicator has no device path)";
  MT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64 || t.dtype == DType::i32)
      << op << ": reduces f32, f64 or i32, got " << t.str();
  MT_CHECK(reduce != ReduceOp::avg || t.dtype != DType::i32) << op << ": an average needs f32 or f64, got " << t.str();
}

void divide_in_place(const TensorView& t, int divisor) {
  if (divisor == 1) return;
  if (t.dtype == DType::f64) {
    double* x = static_cast<double*>(t.data);
    for (int64_t i = 0; i < t.numel(); ++i) x[i] /= divisor;
    return;
  }
  MT_CHECK(t.dtype == DType::f32) << "divide_in_place: f32 or f64 only, got " << t.str();
  const float d = static_cast<float>(divisor);
  float* x = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) x[i] /= d;
}

bool is_part(const TensorView& whole, const TensorView& part, int rank) {
  return part.data == static_cast<const char*>(whole.data) + static_cast<size_t>(rank) * part.bytes();
}

void check_gather_args(const TensorView& whole, const TensorView& part, int size, const char* op, int in_place_rank,
                       bool host_only) {
  MT_CHECK(!host_only || (host_addressable(whole) && host_addressable(part))) << op << ": host tensors only";
  MT_CHECK(whole.dtype == part.dtype) << op << ": dtypes differ: " << whole.str() << " vs " << part.str();
  MT_CHECK(whole.numel() == part.numel() * size)
      << op << ": the whole tensor " << whole.str() << " must hold " << size << " parts of " << part.str();
  const auto* w = static_cast<const char*>(whole.data);
  const auto* p = static_cast<const char*>(part.data);
  if (in_place_rank >= 0 && is_part(whole, part, in_place_rank)) return;
  MT_CHECK(p + part.bytes() <= w || w + whole.bytes() <= p)
      << op << ": input and output overlap" << (in_place_rank >= 0 ? " (other than as this rank's part)" : "");
}

void check_all_to_all_args(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                           std::span<const int64_t> send_counts, int size, const char* op, bool host_only) {
  MT_CHECK(!host_only || (host_addressable(out) && host_addressable(in))) << op << ": host tensors only";
  MT_CHECK(out.dtype == in.dtype) << op << ": dtypes differ: out " << out.str() << " vs in " << in.str();
  auto check_side = [&](std::span<const int64_t> counts, const TensorView& t, const char* side, const char* name) {
    MT_CHECK(counts.size() == static_cast<size_t>(size))
        << op << ": " << counts.size() << " " << side << " counts for a group of " << size << " ranks";
    int64_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      MT_CHECK(counts[r] >= 0) << op << ": " << side << " count for rank " << r << " is " << counts[r];
      total += counts[r];
    }
    MT_CHECK(total == t.numel()) << op << ": the " << side << " counts sum to " << total << " elements but " << name
                                 << " " << t.str() << " holds " << t.numel();
  };
  check_side(send_counts, in, "send", "in");
  check_side(recv_counts, out, "receive", "out");
  const auto* o = static_cast<const char*>(out.data);
  const auto* i = static_cast<const char*>(in.data);
  MT_CHECK(out.bytes() == 0 || in.bytes() == 0 || i + in.bytes() <= o || o + out.bytes() <= i)
      << op << ": in " << in.str() << " and out " << out.str() << " overlap";
}

void check_p2p_args(const TensorView& t, int peer, int tag, int size, int max_tag, const char* op) {
  MT_CHECK(host_addressable(t)) << op << " (peer " << peer << ", tag " << tag << ", " << t.str()
                                    << "): host tensors only (this communicator has no device path)";
  MT_CHECK(peer >= 0 && peer < size) << op << ": peer rank " << peer << " is out of [0, " << size << ") (tag "
                                     << tag << ", " << t.str() << ")";
  MT_CHECK(tag >= 0 && tag <= max_tag) << op << ": tag " << tag << " is out of [0, " << max_tag
                                       << "], the tag upper bound of this communicator (peer " << peer << ", "
                                       << t.str() << ")";
}

void check_message_bytes(size_t message_bytes, const TensorView& t, int src, int tag, const char* op) {
  MT_CHECK(message_bytes == t.bytes()) << op << " from rank " << src << " tag " << tag << ": the message holds "
                                       << message_bytes << " bytes but the receive buffer " << t.str()
                                       << " holds " << t.bytes() << " bytes";
}

namespace {

// The least MPI_TAG_UB the MPI standard allows.
constexpr int kPortableMaxTag = 32767;

struct DoneRequest final : CommRequest {
  void wait() override {}
};

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(const TensorView& t, ReduceOp op) override { check_reduce_args(t, "all_reduce", op); }
  void all_gather(const TensorView& out, const TensorView& in) override {
    check_gather_args(out, in, 1, "all_gather", 0);
    const HostAccess open{out, in};
    if (in.data != out.data) std::memcpy(out.data, in.data, in.bytes());
  }
  void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override {
    check_reduce_args(in, "reduce_scatter", op);
    check_gather_args(in, out, 1, "reduce_scatter");
    const HostAccess open{out, in};
    std::memcpy(out.data, in.data, in.bytes());
  }
  void broadcast(const TensorView& t, int root) override {
    MT_CHECK(root == 0) << "broadcast: root " << root << " is not a rank of a size-1 communicator";
  }
  void barrier() override {}
  void all_to_all_v(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                    std::span<const int64_t> send_counts) override {
    check_all_to_all_args(out, recv_counts, in, send_counts, 1, "all_to_all_v");
    const HostAccess open{out, in};
    if (in.bytes() > 0) std::memcpy(out.data, in.data, in.bytes());
  }
  std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) override {
    all_reduce(t, op);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) override {
    all_gather(out, in);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                    ReduceOp op) override {
    reduce_scatter(out, in, op);
    return std::make_unique<DoneRequest>();
  }

  int max_tag() const override { return kPortableMaxTag; }
  void send(const TensorView& t, int dst, int tag) override {
    check_p2p_args(t, dst, tag, 1, kPortableMaxTag, "send");
    loopback_.send(t, 0, tag);
  }
  void recv(const TensorView& t, int src, int tag) override {
    check_p2p_args(t, src, tag, 1, kPortableMaxTag, "recv");
    loopback_.recv(t, 0, tag, "recv");
  }
  std::unique_ptr<CommRequest> send_async(const TensorView& t, int dst, int tag) override {
    check_p2p_args(t, dst, tag, 1, kPortableMaxTag, "send_async");
    loopback_.send(t, 0, tag);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<CommRequest> recv_async(const TensorView& t, int src, int tag) override {
    check_p2p_args(t, src, tag, 1, kPortableMaxTag, "recv_async");
    return loopback_.recv_async(t, 0, tag, "recv_async");
  }

  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }

 private:
  Loopback loopback_;
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator() { return std::make_unique<SelfCommunicator>(); }

}  // namespace mt
