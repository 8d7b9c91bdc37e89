// The NCCL communicator. Collectives run on a stream of their own that first waits for the compute
// stream (their inputs are made there), and the compute stream waits for them in turn when a request
// completes, so communication overlaps compute exactly as far as the caller's wait() allows; the host
// never blocks on the GPU except for messages between host memory. Point-to-point messages of device
// tensors are staged through host memory over the host communicator: NCCL has no tags, and the
// Communicator contract lets messages of different tags overtake each other.
#include "comm/nccl_communicator.h"

#include <nccl.h>

#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/runtime.h"

#define MT_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    const ncclResult_t mt_nccl_status = (call);                                               \
    MT_CHECK(mt_nccl_status == ncclSuccess) << #call << ": " << ncclGetErrorString(mt_nccl_status) \
                                            << " (" << ncclGetLastError(nullptr) << ")";       \
  } while (0)

namespace mt {

namespace {

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::u8: return ncclUint8;
  }
  MT_FAIL() << op << ": no NCCL type for " << dtype_name(t);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
  }
  return ncclSum;
}

bool on_device(const TensorView& t) { return t.device == Device::cuda; }

// An NCCL operation in flight: an event on the communication stream. wait() makes the compute
// stream wait for it (device-side; the host goes on).
class NcclRequest final : public CommRequest {
 public:
  explicit NcclRequest(cudaEvent_t done) : done_(done) {}
  ~NcclRequest() override {  // completes without throwing (a destructor may run during unwinding)
    if (!done_) return;
    cudaStreamWaitEvent(cuda::stream(), done_, 0);
    cudaEventDestroy(done_);
  }
  void wait() override {
    if (!done_) return;
    const cudaEvent_t e = done_;
    done_ = nullptr;
    MT_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(), e, 0));
    cudaEventDestroy(e);
  }

 private:
  cudaEvent_t done_;
};

// A device tensor's message staged through host memory: a send copies the tensor out first; a
// receive lands in host memory and is copied in on wait(). The request owns the staging bytes.
class StagedRequest final : public CommRequest {
 public:
  StagedRequest(const TensorView& device_dst, size_t bytes) : dst_(device_dst), bytes_(bytes) {}
  TensorView host() { return TensorView(bytes_.data(), DType::u8, {static_cast<int64_t>(bytes_.size())}); }
  void start(std::unique_ptr<CommRequest> inner) { inner_ = std::move(inner); }
  ~StagedRequest() override {  // completes without copying in: the receiver gave up on it
    try {
      if (inner_) inner_->wait();
    } catch (...) {  // a destructor may run during unwinding: the first error is the one to report
    }
  }
  void wait() override {
    if (!inner_) return;
    inner_->wait();
    inner_.reset();
    if (!dst_.empty()) backend_for(Device::cuda).copy_from_host(dst_.data, bytes_.data(), bytes_.size());
  }
  void progress() override {
    if (inner_) inner_->progress();
  }

 private:
  TensorView dst_;  // empty for a send
  std::vector<char> bytes_;
  std::unique_ptr<CommRequest> inner_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Borrows `host`, or owns it (the sub-communicators of split).
  NcclCommunicator(Communicator& host, std::unique_ptr<Communicator> owned) : owned_(std::move(owned)), host_(&host) {
    backend_for(Device::cuda);  // selects the GPU before NCCL binds to it
    ncclUniqueId id{};
    if (host_->rank() == 0) MT_NCCL_CHECK(ncclGetUniqueId(&id));
    host_->broadcast(TensorView(&id, DType::u8, {static_cast<int64_t>(sizeof id)}), 0);
    MT_NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()));
    MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  void all_reduce(const TensorView& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }
  void all_gather(const TensorView& out, const TensorView& in) override { all_gather_async(out, in)->wait(); }
  void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override {
    reduce_scatter_async(out, in, op)->wait();
  }
  void broadcast(const TensorView& t, int root) override {
    if (!on_device(t)) return host_->broadcast(t, root);
    MT_CHECK(root >= 0 && root < size()) << "broadcast: root " << root << " out of [0, " << size() << ")";
    enqueue([&] { MT_NCCL_CHECK(ncclBroadcast(t.data, t.data, t.bytes(), ncclUint8, root, comm_, stream_)); })->wait();
  }
  void barrier() override {
    MT_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
    host_->barrier();
  }
  void all_to_all_v(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                    std::span<const int64_t> send_counts) override {
    if (!on_device(in) && !on_device(out)) return host_->all_to_all_v(out, recv_counts, in, send_counts);
    const char* op = "all_to_all_v";
    MT_CHECK(on_device(in) && on_device(out)) << op << ": in and out must both be GPU tensors";
    check_all_to_all_args(out, recv_counts, in, send_counts, size(), op, false);
    const size_t e = dtype_size(in.dtype);
    enqueue([&] {
      MT_NCCL_CHECK(ncclGroupStart());
      const char* src = static_cast<const char*>(in.data);
      char* dst = static_cast<char*>(out.data);
      for (int r = 0; r < size(); ++r) {
        if (send_counts[r] > 0) MT_NCCL_CHECK(ncclSend(src, send_counts[r] * e, ncclUint8, r, comm_, stream_));
        if (recv_counts[r] > 0) MT_NCCL_CHECK(ncclRecv(dst, recv_counts[r] * e, ncclUint8, r, comm_, stream_));
        src += send_counts[r] * e;
        dst += recv_counts[r] * e;
      }
      MT_NCCL_CHECK(ncclGroupEnd());
    })->wait();
  }

  std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) override {
    if (!on_device(t)) return host_->all_reduce_async(t, op);
    MT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64 || t.dtype == DType::i32 || t.dtype == DType::bf16)
        << "all_reduce: reduces f32, f64, i32 or bf16, got " << t.str();
    return enqueue([&] {
      MT_NCCL_CHECK(ncclAllReduce(t.data, t.data, t.numel(), nccl_type(t.dtype, "all_reduce"), nccl_op(op), comm_,
                                  stream_));
    });
  }
  std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) override {
    if (!on_device(out)) return host_->all_gather_async(out, in);
    check_parts(out, in, "all_gather", rank());
    return enqueue([&] {
      MT_NCCL_CHECK(ncclAllGather(in.data, out.data, in.bytes(), ncclUint8, comm_, stream_));
    });
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                    ReduceOp op) override {
    if (!on_device(in)) return host_->reduce_scatter_async(out, in, op);
    check_parts(in, out, "reduce_scatter", -1);
    return enqueue([&] {
      MT_NCCL_CHECK(ncclReduceScatter(in.data, out.data, out.numel(), nccl_type(in.dtype, "reduce_scatter"),
                                      nccl_op(op), comm_, stream_));
    });
  }

  int max_tag() const override { return host_->max_tag(); }
  void send(const TensorView& t, int dst, int tag) override { send_async(t, dst, tag)->wait(); }
  void recv(const TensorView& t, int src, int tag) override { recv_async(t, src, tag)->wait(); }
  std::unique_ptr<CommRequest> send_async(const TensorView& t, int dst, int tag) override {
    if (!on_device(t)) return host_->send_async(t, dst, tag);
    auto r = std::make_unique<StagedRequest>(TensorView(), t.bytes());
    backend_for(Device::cuda).copy_to_host(r->host().data, t.data, t.bytes());
    r->start(host_->send_async(r->host(), dst, tag));
    return r;
  }
  std::unique_ptr<CommRequest> recv_async(const TensorView& t, int src, int tag) override {
    if (!on_device(t)) return host_->recv_async(t, src, tag);
    auto r = std::make_unique<StagedRequest>(t, t.bytes());
    r->start(host_->recv_async(r->host(), src, tag));
    return r;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> sub = host_->split(color, key);
    Communicator& host = *sub;
    return std::make_unique<NcclCommunicator>(host, std::move(sub));
  }
  [[noreturn]] void abort(int code) override {
    if (comm_) ncclCommAbort(comm_);
    host_->abort(code);
    std::_Exit(code);  // not reached: the host communicator's abort ends the job
  }

 private:
  // Runs `issue` on the communication stream after the compute stream's work so far; returns the
  // request that completes with it.
  template <typename Issue>
  std::unique_ptr<CommRequest> enqueue(Issue&& issue) {
    cudaEvent_t ready = nullptr, done = nullptr;
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(ready, cuda::stream()));
    MT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    issue();
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventRecord(done, stream_));
    return std::make_unique<NcclRequest>(done);
  }

  // in_place_rank >= 0: part may be exactly whole's in_place_rank-th part.
  void check_parts(const TensorView& whole, const TensorView& part, const char* op, int in_place_rank) const {
    MT_CHECK(on_device(whole) && on_device(part)) << op << ": both tensors must be GPU tensors";
    check_gather_args(whole, part, size(), op, in_place_rank, false);
  }

  std::unique_ptr<Communicator> owned_;
  Communicator* host_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host, nullptr);
}

}  // namespace mt
