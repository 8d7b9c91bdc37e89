// A job in which rank 1 fails while every other rank waits: in a collective, or (argument "recv")
// in a receive from rank 1, as a pipeline stage waits for its neighbour's activation or gradient.
// Run under mpirun by CTest, which checks that the failing rank's message is printed and the
// whole job ends (the test times out if any rank hangs).
#include <string>

#include "app/commands.h"
#include "base/error.h"
#include "comm/mpi_communicator.h"

int main(int argc, char** argv) {
  const bool receive = argc > 1 && std::string(argv[1]) == "recv";
  std::unique_ptr<mt::Communicator> world = mt::make_mpi_world_communicator();
  return mt::run_or_abort("abort-check", world.get(), [&] {
    if (world->rank() == 1) MT_FAIL() << "injected failure on rank 1";
    float x = 1.0f;
    if (receive)
      world->recv(mt::TensorView(&x, mt::DType::f32, {1}), 1, 0);  // never arrives
    else
      world->all_reduce(mt::TensorView(&x, mt::DType::f32, {1}), mt::ReduceOp::sum);  // never completes
    return 0;
  });
}
