#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <string>

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

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

// Gathers and broadcasts move bytes, so any dtype works.
int byte_count(const TensorView& t) {
  MT_CHECK(t.bytes() <= static_cast<size_t>(INT32_MAX)) << "a single collective moves at most 2 GiB, got " << t.str();
  return static_cast<int>(t.bytes());
}

int element_count(const TensorView& t) {
  MT_CHECK(t.numel() <= INT32_MAX) << "a single collective moves at most 2^31 elements, got " << t.str();
  return static_cast<int>(t.numel());
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
  MPI_Request* handle() { return &request_; }
  void wait() override {
    if (request_ != MPI_REQUEST_NULL) check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
  }
  ~MpiRequest() override {
    // Never leave a collective dangling: complete it (errors here cannot be thrown).
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

 private:
  MPI_Request request_ = MPI_REQUEST_NULL;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owns_mpi) : comm_(comm), owns_mpi_(owns_mpi) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(const TensorView& t, ReduceOp op) override {
    check_reduce_args(t, "all_reduce");
    // MPI counts are int: a whole gradient buffer can exceed 2^31 elements, so go in pieces.
    const int64_t piece = int64_t{1} << 30;
    auto* data = static_cast<char*>(t.data);
    for (int64_t first = 0; first < t.numel(); first += piece) {
      const int count = static_cast<int>(std::min(piece, t.numel() - first));
      check(MPI_Allreduce(MPI_IN_PLACE, data + first * static_cast<int64_t>(dtype_size(t.dtype)), count,
                          mpi_type(t.dtype), mpi_op(op), comm_),
            "MPI_Allreduce");
    }
  }
  void all_gather(const TensorView& out, const TensorView& in) override {
    check_gather_args(out, in, size_, "all_gather");
    check(MPI_Allgather(in.data, byte_count(in), MPI_BYTE, out.data, byte_count(in), MPI_BYTE, comm_),
          "MPI_Allgather");
  }
  void reduce_scatter(const TensorView& out, const TensorView& in, ReduceOp op) override {
    check_reduce_args(in, "reduce_scatter");
    check_gather_args(in, out, size_, "reduce_scatter");
    check(MPI_Reduce_scatter_block(in.data, out.data, element_count(out), mpi_type(in.dtype), mpi_op(op), comm_),
          "MPI_Reduce_scatter_block");
  }
  void broadcast(const TensorView& t, int root) override {
    MT_CHECK(t.device == Device::cpu) << "broadcast: host tensors only";
    MT_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " out of [0, " << size_ << ")";
    check(MPI_Bcast(t.data, byte_count(t), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  std::unique_ptr<CommRequest> all_reduce_async(const TensorView& t, ReduceOp op) override {
    check_reduce_args(t, "all_reduce_async");
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Iallreduce(MPI_IN_PLACE, t.data, element_count(t), mpi_type(t.dtype), mpi_op(op), comm_, r->handle()),
          "MPI_Iallreduce");
    return r;
  }
  std::unique_ptr<CommRequest> all_gather_async(const TensorView& out, const TensorView& in) override {
    check_gather_args(out, in, size_, "all_gather_async");
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Iallgather(in.data, byte_count(in), MPI_BYTE, out.data, byte_count(in), MPI_BYTE, comm_, r->handle()),
          "MPI_Iallgather");
    return r;
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const TensorView& out, const TensorView& in,
                                                    ReduceOp op) override {
    check_reduce_args(in, "reduce_scatter_async");
    check_gather_args(in, out, size_, "reduce_scatter_async");
    auto r = std::make_unique<MpiRequest>();
    check(MPI_Ireduce_scatter_block(in.data, out.data, element_count(out), mpi_type(in.dtype), mpi_op(op), comm_,
                                    r->handle()),
          "MPI_Ireduce_scatter_block");
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
  int rank_ = 0, size_ = 1;
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
