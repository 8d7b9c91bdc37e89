#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/host_access.h"
#include "comm/loopback.h"

namespace mt {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    default: MT_FAIL() << "no MPI reduction for " << dtype_name(t);
  }
}

// MPI has no average: avg is a sum here, then divide_in_place.
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// Gathers, broadcasts and messages move bytes, so any dtype works; MPI counts are int.
int byte_count(const TensorView& t, const char* op) {
  MT_CHECK(t.bytes() <= static_cast<size_t>(INT32_MAX))
      << op << ": one call moves at most 2^31 - 1 bytes, got " << t.str() << " (" << t.bytes()
      << " bytes); split it";
  return static_cast<int>(t.bytes());
}

int element_count(const TensorView& t) {
  MT_CHECK(t.numel() <= INT32_MAX) << "a single collective moves at most 2^31 elements, got " << t.str();
  return static_cast<int>(t.numel());
}

// An all-gather whose input is this rank's part of the output runs in place.
const void* gather_input(const TensorView& out, const TensorView& in, int rank) {
  return is_part(out, in, rank) ? MPI_IN_PLACE : in.data;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  MT_FAIL() << what << " failed: " << std::string(text, static_cast<size_t>(length));
}

class MpiRequest final : public CommRequest {
 public:
  MpiRequest() = default;
  // A receive: wait() checks that the message filled `t` exactly.
  MpiRequest(const TensorView& t, int src, int tag) : is_recv_(true), recv_(t), src_(src), tag_(tag) {}
  MPI_Request* handle() { return &request_; }
  // Host copies of the call's guard tensors; copied back once it completes.
  HostStaging& staging() { return staging_; }
  // ReduceOp::avg: once complete, `result` is divided by the group size.
  void average_on_completion(const TensorView& result, int size) {
    average_ = result;
    divisor_ = size;
  }
  void progress() override {
    // Non-destructive (the request stays for wait(), which checks a receive's size).
    int done = 0;
    if (request_ != MPI_REQUEST_NULL) MPI_Request_get_status(request_, &done, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (request_ == MPI_REQUEST_NULL) return;
    MPI_Status status;
    const int rc = MPI_Wait(&request_, &status);
    // Open MPI keeps a request that completed with an error; free it so the destructor does not wait again.
    if (rc != MPI_SUCCESS && request_ != MPI_REQUEST_NULL) MPI_Request_free(&request_);
    if (!is_recv_) {
      check(rc, "MPI_Wait");
      if (!average_.empty()) divide_in_place(average_, divisor_);
      staging_.finish();
      return;
    }
    int error_class = MPI_SUCCESS;
    MPI_Error_class(rc, &error_class);
    // MPI truncates and does not say how long the message was.
    MT_CHECK(error_class != MPI_ERR_TRUNCATE) << "recv_async from rank " << src_ << " tag " << tag_
                                              << ": the message is larger than the receive buffer " << recv_.str()
                                              << " (" << recv_.bytes() << " bytes)";
    check(rc, "MPI_Wait (recv_async)");
    int count = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
    check_message_bytes(static_cast<size_t>(count), recv_, src_, tag_, "recv_async");
    staging_.finish();
  }
  ~MpiRequest() override {
    // Never leave a collective or a message dangling: complete it (errors here cannot be thrown).
    if (request_ == MPI_REQUEST_NULL) return;
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
    staging_.finish();
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool is_recv_ = false;
  TensorView recv_;
  int src_ = -1, tag_ = -1;
  TensorView average_;  // host (the staged copy of a guard tensor)
  int divisor_ = 1;
  HostStaging staging_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owns_mpi) : comm_(comm), owns_mpi_(owns_mpi) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // MPI attaches MPI_TAG_UB to the world communicator only; it holds for every communicator.
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    MT_CHECK(found && tag_ub) << "MPI_TAG_UB is not set on MPI_COMM_WORLD";
    max_tag_ = *tag_ub;
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(const TensorView& t, ReduceOp op) override {
    check_reduce_args(t, "all_reduce", op);
    const HostAccess open{t};
    // MPI counts are int: a whole gradient buffer can exceed 2^31 elements, so go in pieces.
    const int64_t piece = int64_t{1} << 30;
    auto* data = static_cast<char*>(t.data);
    for (int64_t first = 0; first < t.numel(); first += piece) {
      const int count = static_cast<int>(std::min(piece, t.numel() - first));
      check(MPI_Allreduce(MPI_IN_PLACE, data + first * static_cast<int64_t>(dtype_size(t.dtype)), count,
                          mpi_type(t.dtype), mpi_op(op), comm_),
            "MPI_Allreduce");
    }
    if (op == ReduceOp::avg) divide_in_place(t, size_);
  }
  void all_gather(const TensorView& out, const TensorView& in) override {
    check_gather_args(out, in, size_, "all_gather", rank_);
    const HostAccess open{out, in};
    const int count = byte_count(in, "all_gather");
    check(MPI_Allgather(gather_input(out, in, rank_), count, MPI_BYTE, out.data, count, MPI_BYTE, comm_), "MPI_Allgather");
  }
  void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override {
    check_reduce_args(in, "reduce_scatter", op);
    check_gather_args(in, out, size_, "reduce_scatter");
    const HostAccess open{out, in};
    check(MPI_Reduce_scatter_block(in.data, out.data, element_count(out), mpi_type(in.dtype), mpi_op(op), comm_),
          "MPI_Reduce_scatter_block");
    if (op == ReduceOp::avg) divide_in_place(out, size_);
  }
  void broadcast(const TensorView& t, int root) override {
    MT_CHECK(host_addressable(t)) << "broadcast: host tensors only";
    MT_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " out of [0, " << size_ << ")";
    const HostAccess open{t};
    check(MPI_Bcast(t.data, byte_count(t, "broadcast"), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  void all_to_all_v(const TensorView& out, std::span<const int64_t> recv_counts, const TensorView& in,
                    std::span<const int64_t> send_counts) override {
    const char* op = "all_to_all_v";
    check_all_to_all_args(out, recv_counts, in, send_counts, size_, op);
    // Counts and displacements are int: count in elements (a contiguous type of the element size)
    // so a call may move up to 2^31 - 1 elements per side, not bytes.
    MT_CHECK(in.numel() <= INT32_MAX && out.numel() <= INT32_MAX)
        << op << ": one call moves at most 2^31 - 1 elements per side, got in " << in.str() << " and out "
        << out.str() << "; split it";
    a2a_counts_.resize(4 * static_cast<size_t>(size_));
    int* sendc = a2a_counts_.data();
    int* sdispl = sendc + size_;
    int* recvc = sdispl + size_;
    int* rdispl = recvc + size_;
    for (int r = 0, s = 0, d = 0; r < size_; s += sendc[r], d += recvc[r], ++r) {
      sendc[r] = static_cast<int>(send_counts[r]);
      recvc[r] = static_cast<int>(recv_counts[r]);
      sdispl[r] = s;
      rdispl[r] = d;
    }
    MPI_Datatype element = MPI_DATATYPE_NULL;
    check(MPI_Type_contiguous(static_cast<int>(dtype_size(in.dtype)), MPI_BYTE, &element), "MPI_Type_contiguous");
    check(MPI_Type_commit(&element), "MPI_Type_commit");
    const HostAccess open{out, in};
    const int rc = MPI_Alltoallv(in.data, sendc, sdispl, element, out.data, recvc, rdispl, element, comm_);
    MPI_Type_free(&element);
    check(rc, "MPI_Alltoallv");
  }

  std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) override {
    check_reduce_args(t, "all_reduce_async", op);
    auto r = std::make_unique<MpiRequest>();
    const TensorView h = r->staging().host(t, true, true);
    if (op == ReduceOp::avg) r->average_on_completion(h, size_);
    check(MPI_Iallreduce(MPI_IN_PLACE, h.data, element_count(h), mpi_type(h.dtype), mpi_op(op), comm_, r->handle()),
          "MPI_Iallreduce");
    return r;
  }
  std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) override {
    check_gather_args(out, in, size_, "all_gather_async", rank_);
    auto r = std::make_unique<MpiRequest>();
    const int count = byte_count(in, "all_gather_async");
    // A staged part is no longer inside the staged whole: gather_input then sends it as a copy.
    const TensorView out_h = r->staging().host(out, false, true), in_h = r->staging().host(in, true, false);
    check(MPI_Iallgather(gather_input(out_h, in_h, rank_), count, MPI_BYTE, out_h.data, count, MPI_BYTE, comm_,
                         r->handle()),
          "MPI_Iallgather");
    return r;
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                    ReduceOp op) override {
    check_reduce_args(in, "reduce_scatter_async", op);
    check_gather_args(in, out, size_, "reduce_scatter_async");
    auto r = std::make_unique<MpiRequest>();
    const TensorView out_h = r->staging().host(out, false, true), in_h = r->staging().host(in, true, false);
    if (op == ReduceOp::avg) r->average_on_completion(out_h, size_);
    check(MPI_Ireduce_scatter_block(in_h.data, out_h.data, element_count(out), mpi_type(in.dtype), mpi_op(op), comm_,
                                    r->handle()),
          "MPI_Ireduce_scatter_block");
    return r;
  }

  int max_tag() const override { return max_tag_; }
  void send(const TensorView& t, int dst, int tag) override {
    check_p2p_args(t, dst, tag, size_, max_tag_, "send");
    if (dst == rank_) return loopback_.send(t, rank_, tag);
    const HostAccess open{t};
    check(MPI_Send(t.data, byte_count(t, "send"), MPI_BYTE, dst, tag, comm_), "MPI_Send");
  }
  void recv(const TensorView& t, int src, int tag) override {
    check_p2p_args(t, src, tag, size_, max_tag_, "recv");
    if (src == rank_) return loopback_.recv(t, rank_, tag, "recv");
    const int count = byte_count(t, "recv");
    // Probe first: a message of the wrong size is then reported with both sizes (MPI would truncate).
    MPI_Status status;
    check(MPI_Probe(src, tag, comm_, &status), "MPI_Probe");
    int arrived = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &arrived), "MPI_Get_count");
    check_message_bytes(static_cast<size_t>(arrived), t, src, tag, "recv");
    const HostAccess open{t};
    check(MPI_Recv(t.data, count, MPI_BYTE, src, tag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
  }
  std::unique_ptr<CommRequest> send_async(const TensorView& t, int dst, int tag) override {
    check_p2p_args(t, dst, tag, size_, max_tag_, "send_async");
    auto r = std::make_unique<MpiRequest>();
    if (dst == rank_) {
      loopback_.send(t, rank_, tag);
      return r;  // already complete
    }
    const TensorView h = r->staging().host(t, true, false);
    check(MPI_Isend(h.data, byte_count(t, "send_async"), MPI_BYTE, dst, tag, comm_, r->handle()), "MPI_Isend");
    return r;
  }
  std::unique_ptr<CommRequest> recv_async(const TensorView& t, int src, int tag) override {
    check_p2p_args(t, src, tag, size_, max_tag_, "recv_async");
    if (src == rank_) return loopback_.recv_async(t, rank_, tag, "recv_async");
    auto r = std::make_unique<MpiRequest>(t, src, tag);
    const TensorView h = r->staging().host(t, false, true);
    check(MPI_Irecv(h.data, byte_count(t, "recv_async"), MPI_BYTE, src, tag, comm_, r->handle()), "MPI_Irecv");
    return r;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(sub, false);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

 private:
  MPI_Comm comm_;
  bool owns_mpi_;
  int rank_ = 0, size_ = 1, max_tag_ = 0;
  Loopback loopback_;  // messages to self (communicator.h: they never block)
  std::vector<int> a2a_counts_;  // all_to_all_v's counts and displacements, kept to spare an allocation
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world_communicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  MT_CHECK(!initialized) << "MPI is already initialised: create the world communicator once per process";
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  // Errors come back as return codes (turned into mt::Error) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, true);
}

}  // namespace mt
