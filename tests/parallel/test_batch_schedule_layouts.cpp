// End to end: a run under --step-batch-size-schedule (8 samples an iteration, 16 from sample 40)
// reproduces the single-rank loss curve with data parallelism over the whole job and with two
// pipeline stages (data parallelism takes the rest), evaluating with its own
// --eval-global-batch-size through the forward-only schedule.
#include "train_testing.h"

namespace mt::test {
namespace {

TEST(BatchScheduleTrain, DataAndPipelineParallelMatchSingleRank) {
  TrainConfig run = short_run();
  run.global_batch_size = 0;
  run.step_batch_size_schedule = BatchSchedule::parse("0:8 40:16", 0);
  run.eval_global_batch_size = 8;
  run.eval_interval = 10;
  run.eval_iters = 2;
  expect_same_curve(gpt2_style(), 1, false, run);
  run.pipeline.pp = 2;
  expect_same_curve(gpt2_style(), 1, false, run);
}

}  // namespace
}  // namespace mt::test
