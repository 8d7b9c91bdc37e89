#!/usr/bin/env bash
# Installs every Debian package megatron.cpp needs to build, run and test. Idempotent: packages
# already present are skipped, so a machine that has everything does not touch the network.
set -euo pipefail

packages=(
  build-essential cmake pkg-config      # toolchain
  libopenblas-openmp-dev                # GEMM (the OpenMP build shares our thread pool)
  nlohmann-json3-dev                    # safetensors headers
  libyaml-cpp-dev                       # --config files
  libopenmpi-dev openmpi-bin            # multi-rank runs (mpirun) and the parallel tests
  libgtest-dev libgmock-dev             # tests
  libbenchmark-dev                      # bench/
)
# The PyTorch reference (tools/ref/) is only needed to regenerate fixtures: MT_WITH_TORCH=1.
if [[ "${MT_WITH_TORCH:-0}" == "1" ]]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
