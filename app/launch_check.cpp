#include "app/launch_check.h"

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace mt {

namespace {

// The positive integer in variable `name`, or 0 when it is unset or not one.
long positive(const std::function<const char*(const char*)>& env, const char* name) {
  const char* text = env(name);
  if (text == nullptr) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && value > 0 ? value : 0;
}

}  // namespace

void check_launcher_started_one_process(const std::function<const char*(const char*)>& env) {
  // srun runs every task of a step with SLURM_STEP_NUM_TASKS; without an MPI plugin (--mpi=none,
  // Slurm's default) none of them learns of the others.
  if (const long tasks = positive(env, "SLURM_STEP_NUM_TASKS"); tasks > 1 && env("SLURM_PROCID") != nullptr)
    MT_FAIL() << "srun started " << tasks << " tasks (SLURM_STEP_NUM_TASKS), but they were not started as one MPI "
              << "job, so each would train alone and write the same files; start them with srun --mpi=pmix "
              << "(Slurm's PMIx plugin; Debian's Open MPI has no PMI-2 client), or with mpirun -np " << tasks;
  // torchrun (torch.distributed.run) sets WORLD_SIZE and each process's LOCAL_RANK for its own
  // rendezvous, which megatron does not use.
  if (const long processes = positive(env, "WORLD_SIZE");
      processes > 1 && (env("LOCAL_RANK") != nullptr || env("TORCHELASTIC_RUN_ID") != nullptr))
    MT_FAIL() << "torchrun started " << processes << " processes (WORLD_SIZE), but megatron's ranks are MPI ranks, "
              << "so each would train alone and write the same files; start them with mpirun -np " << processes
              << " (or srun --mpi=pmix under Slurm)";
}

}  // namespace mt
