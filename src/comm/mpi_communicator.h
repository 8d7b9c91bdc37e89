// Owns the MPI implementation of Communicator (host memory) and the job's MPI lifetime: the
// world communicator initialises MPI on creation and finalises it when destroyed.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace mt {

// Initialises MPI (MPI_THREAD_FUNNELED: only the main thread communicates) and returns
// MPI_COMM_WORLD. Call once per process; MPI is finalised when the returned object is destroyed.
std::unique_ptr<Communicator> make_mpi_world_communicator();

}  // namespace mt
