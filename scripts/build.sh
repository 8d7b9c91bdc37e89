#!/usr/bin/env bash
# Configures and builds megatron.cpp (Release) into ./build. Extra arguments go to cmake;
# MT_CUDA=auto|on|off (default auto: the CUDA backend when the toolkit is found); MT_BUILD_TARGET
# builds that target alone (the quick start: megatron, without the tests and benchmarks).
set -euo pipefail
# The repository this script belongs to, links resolved (the docs test runs it from a directory of links).
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
# nvcc is often installed off the PATH, under /usr/local/cuda.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMT_CUDA="${MT_CUDA:-auto}" "$@" > "$log" 2>&1; then
  cat "$log"
  exit 1
fi
grep -E "CUDA backend" "$log" || true  # say whether the CUDA backend is built
targets=()
if [[ -n "${MT_BUILD_TARGET:-}" ]]; then targets=(--target "$MT_BUILD_TARGET"); fi
cmake --build build -j "$(nproc)" "${targets[@]}"
