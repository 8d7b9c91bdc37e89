// GoogleTest entry for the parallel tier, run by CTest under `mpirun -np N`: every rank runs
// every test on MPI_COMM_WORLD; the exit code is nonzero on every rank when a test failed on any.
#include <gtest/gtest.h>

#include <cstdio>

#include "app/blas_tuning.h"
#include "comm/mpi_communicator.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {
Communicator* g_world = nullptr;
}
Communicator& world() { return *g_world; }

namespace {
// Ranks other than 0 print only what failed, each line marked with the rank, so a failure seen
// by one rank alone is not hidden behind rank 0's PASSED.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] [  FAILED  ] %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};
}  // namespace
}  // namespace mt::test

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<mt::Communicator> world = mt::make_mpi_world_communicator();
  mt::test::g_world = world.get();
  // Only rank 0 prints the test-by-test progress; failures print on the rank that saw them.
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new mt::test::FailurePrinter(world->rank()));
  }
  const int failed_here = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed = failed_here;
  world->all_reduce(mt::TensorView(&failed, mt::DType::i32, {1}), mt::ReduceOp::max);
  if (world->rank() == 0 && failed && !failed_here)
    std::fprintf(stderr, "a test failed on another rank: see its [rank N] lines\n");
  return failed;
}
