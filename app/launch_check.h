// Owns the start-up check that a launcher and MPI agree on the job. A launcher that starts several
// processes without giving MPI the means to join them (Slurm's srun without --mpi=pmix, torchrun)
// would leave every process a one-rank job training its own copy of the model, and writing the same
// checkpoint directory: each stops instead, naming the fix.
#pragma once

#include <functional>

namespace mt {

// Throws mt::Error when `env` (getenv) shows that a launcher started several processes of this job
// but this process was not started as an MPI rank. Call it before MPI would make a one-rank world.
void check_launcher_started_one_process(const std::function<const char*(const char*)>& env);

}  // namespace mt
