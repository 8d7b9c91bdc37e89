// GoogleTest entry for every tier: tests run with the same OpenBLAS kernels as `megatron`.
#include <gtest/gtest.h>

#include "app/blas_tuning.h"

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
