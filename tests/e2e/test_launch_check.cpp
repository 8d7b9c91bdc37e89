// A launcher that starts several processes which MPI does not join into one job (plain srun,
// torchrun) is refused at start by every process, naming the fix, before anything is written;
// an MPI launch, a single task and unrelated variables pass.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "app/launch_check.h"
#include "testing.h"

namespace mt {
namespace {

void check_with(const std::map<std::string, std::string>& vars) {
  check_launcher_started_one_process([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchCheck, SeveralTasksWithoutMpiAreRefusedNamingTheFix) {
  EXPECT_TRUE(test::expect_error_mentioning(
      [] { check_with({{"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "2"}}); },
      "srun started 4 tasks (SLURM_STEP_NUM_TASKS), but they were not started as one MPI job"));
  EXPECT_TRUE(test::expect_error_mentioning(
      [] { check_with({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "0"}}); }, "srun --mpi=pmix"));
  EXPECT_TRUE(test::expect_error_mentioning(
      [] { check_with({{"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}, {"RANK", "3"}}); },
      "torchrun started 8 processes (WORLD_SIZE)"));
  EXPECT_TRUE(test::expect_error_mentioning(
      [] { check_with({{"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "x"}}); }, "mpirun -np 2"));
}

TEST(LaunchCheck, OneTaskAndOtherEnvironmentsPass) {
  EXPECT_NO_THROW(check_with({}));
  EXPECT_NO_THROW(check_with({{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_PROCID", "0"}}));
  EXPECT_NO_THROW(check_with({{"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "7"}}));  // a batch script, no step
  EXPECT_NO_THROW(check_with({{"WORLD_SIZE", "4"}}));                           // no torchrun rank
  EXPECT_NO_THROW(check_with({{"SLURM_STEP_NUM_TASKS", "two"}, {"SLURM_PROCID", "0"}}));
}

// The binary under plain srun's environment: exit 1 with the message, no checkpoint directory.
TEST(LaunchCheck, TheBinaryStopsBeforeWritingAnything) {
  test::TempDir dir;
  const std::string out = dir.file("out.txt"), save = dir.file("ckpt");
  const std::string command = "env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u PMI_RANK "
                              "SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 " MT_MEGATRON_BINARY
                              " train --mock-data --vocab-size 64 --num-layers 1 --hidden-size 32 "
                              "--num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --train-iters 2 "
                              "--lr 1e-3 --save " + save + " > " + out + " 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  EXPECT_NE(text.str().find("srun started 2 tasks"), std::string::npos) << text.str();
  EXPECT_FALSE(std::filesystem::exists(save));
}

}  // namespace
}  // namespace mt
