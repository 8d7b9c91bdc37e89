#!/usr/bin/env bash
# Sets up everything and runs every test: dependencies, build, then CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
# CTest names a test only when it ends: every minute, say which have been running for 2 minutes or more.
ctest --output-on-failure -j "$(nproc)" "$@" &
ctest_pid=$!
ticks=0
while kill -0 "$ctest_pid" 2>/dev/null; do
  sleep 5
  ((++ticks % 12)) && continue
  { ps --ppid "$ctest_pid" -o etimes=,args= || true; } | while read -r seconds command; do  # ps fails when none runs
    if ((seconds >= 120)); then echo "[test.sh] still running after $((seconds / 60)) min: ${command:0:160}"; fi
  done
done
wait "$ctest_pid"
# Say what could not run here and why (CTest lists it as skipped): the CUDA op cases without a GPU.
./tests/mt_tests_device --require-cuda --gtest_filter=None.None | grep skipped || true
