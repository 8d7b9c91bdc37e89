// A job in which rank 1 fails while every other rank waits in a collective: run under mpirun by
// CTest, which checks that the failing rank's message is printed and the whole job ends (the test
// times out if any rank hangs).
#include "app/commands.h"
#include "base/error.h"
#include "comm/mpi_communicator.h"

int main() {
  std::unique_ptr<mt::Communicator> world = mt::make_mpi_world_communicator();
  return mt::run_or_abort("abort-check", world.get(), [&] {
    if (world->rank() == 1) MT_FAIL() << "injected failure on rank 1";
    float x = 1.0f;
    world->all_reduce(mt::TensorView(&x, mt::DType::f32, {1}), mt::ReduceOp::sum);  // never completes
    return 0;
  });
}
