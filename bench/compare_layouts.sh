#!/usr/bin/env bash
# Same-session comparison of launch layouts on one 2-core machine, alternating the layouts each
# round: 1 process x 2 OpenMP threads, 2 ranks with tensor parallelism, with sequence parallelism,
# and data parallelism (mock data, Llama-style model, fp32). Prints ms/iter per round; run from
# the repository root after scripts/build.sh. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
M="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --group-query-attention --num-query-groups 4 --normalization RMSNorm --swiglu --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights --seq-length 512 --micro-batch-size 4 --global-batch-size 8 --mock-data --vocab-size 32768 --lr 1e-3 --train-iters 12 --log-interval 6 --eval-iters 0"
ms() { grep -E "iteration +12/" | sed -E 's/.*elapsed time per iteration \(ms\): ([0-9.]+).*/\1/'; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for round in 1 2 3; do
  a=$(OMP_NUM_THREADS=2 build/megatron train $M 2>&1 | ms)
  b=$(OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 build/megatron train $M --tensor-model-parallel-size 2 2>&1 | ms)
  c=$(OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 build/megatron train $M --tensor-model-parallel-size 2 --sequence-parallel 2>&1 | ms)
  d=$(OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 build/megatron train $M 2>&1 | ms)
  echo "round $round ms/iter: 1 rank x 2 threads $a | tp2 $b | tp2+sp $c | dp2 $d"
done
