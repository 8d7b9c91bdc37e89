// GoogleTest entry for the parallel tier, run by CTest under `mpirun -np N`: every rank runs
// every test on MPI_COMM_WORLD; the exit code is nonzero on every rank when a test failed on any.
#include <gtest/gtest.h>

#include "app/blas_tuning.h"
#include "comm/mpi_communicator.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {
Communicator* g_world = nullptr;
}
Communicator& world() { return *g_world; }
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
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  world->all_reduce(mt::TensorView(&failed, mt::DType::i32, {1}), mt::ReduceOp::max);
  return failed;
}
