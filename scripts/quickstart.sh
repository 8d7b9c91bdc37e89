#!/usr/bin/env bash
# Sets up everything and runs the main job: a short training run of a small GPT (Llama-style:
# RMSNorm, SwiGLU, RoPE, GQA) on synthetic learnable tokens, printing Megatron's log line.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec ./build/megatron train \
  --num-layers 4 --hidden-size 128 --num-attention-heads 8 \
  --group-query-attention --num-query-groups 2 \
  --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear \
  --untie-embeddings-and-output-weights \
  --seq-length 128 --micro-batch-size 8 --global-batch-size 16 \
  --vocab-size 256 --mock-data \
  --lr 3e-3 --train-iters 200 --log-interval 10 \
  --hidden-dropout 0 --attention-dropout 0 "$@"
