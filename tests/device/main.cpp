// GoogleTest entry for the device tier. It says first which device the cases run on; with
// --require-cuda (CTest's cuda_op_cases) it exits 77, which CTest reports as skipped, when the
// cases could only run on the guard backend, so CI says plainly that no CUDA kernel ran.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "device_testing.h"

int main(int argc, char** argv) {
  bool require_cuda = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-cuda") != 0) continue;
    require_cuda = true;
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    break;
  }
  const std::string reason = mt::test::device_under_test_reason();
  if (require_cuda && mt::test::device_under_test() != mt::Device::cuda) {
    std::printf("cuda_op_cases skipped: %s\n", reason.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (!::testing::GTEST_FLAG(list_tests)) std::printf("device tier on %s\n", reason.c_str());
  return RUN_ALL_TESTS();
}
