#!/usr/bin/env bash
# Sets up everything and runs every test: dependencies, build, then CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
