#!/usr/bin/env bash
# Sets up everything and runs every test: dependencies, build, then CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
# Say what could not run here and why (CTest lists it as skipped): the CUDA op cases without a GPU.
./tests/mt_tests_device --require-cuda --gtest_filter=None.None | grep skipped || true
