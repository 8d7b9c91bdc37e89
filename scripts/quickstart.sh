#!/usr/bin/env bash
# Sets up everything and runs the main job: a short training run of a small GPT (Llama-style:
# RMSNorm, SwiGLU, RoPE, GQA) on Megatron's mock data (sequences 1, 2, 3, ... then EOD, read
# through the GPT dataset machinery with a NullTokenizer), accumulating 2 micro-batches per
# global batch, with linear warmup then cosine decay of the learning rate, Megatron's log line
# every 10 iterations and an evaluation on held-out data every 50 (plus validation and test at
# the end). The loss falls from log(256) = 5.5 to a few hundredths.
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
  --mock-data --tokenizer-type NullTokenizer --vocab-size 256 \
  --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 15 \
  --train-iters 150 --log-interval 10 --eval-interval 50 --eval-iters 10 \
  --hidden-dropout 0 --attention-dropout 0 "$@"
