#!/usr/bin/env bash
# bench/compare_generate.sh: our decode speed against PyTorch eager with a KV cache, same machine,
# same run. Runs $BUILD_DIR/bench/generate_throughput and bench/pytorch_generate.py alternately,
# ROUNDS times each (ours, pytorch, ours, pytorch), with the same arguments (--batch, --prompt,
# --tokens, --repeats), prints every raw line, then per batch size the median tokens/s of each side
# and the ratio ours/pytorch. Our lines also give the ratio to the memory-bandwidth limit.
#
#   bench/compare_generate.sh [--batch 1,16] [--prompt 32] [--tokens 32] [--repeats 3]
#
# Environment: BUILD_DIR (default build), PYTHON (default /usr/bin/python3, Debian's torch),
# OMP_NUM_THREADS (default 2, used by both), ROUNDS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 0; r < ROUNDS; r++)); do
  "$BUILD_DIR/bench/generate_throughput" "$@" | tee -a "$log"
  "$PYTHON" bench/pytorch_generate.py "$@" | tee -a "$log"
done
echo
echo "batch | ours tokens/s | pytorch tokens/s | ours / pytorch"
awk '
  /^batch [0-9]+: decode/ { b = $2; sub(":", "", b); ours[b] = ours[b] " " $4; batches[b] = 1 }
  /^pytorch batch [0-9]+: decode/ { b = $3; sub(":", "", b); theirs[b] = theirs[b] " " $5 }
  function med(list,   n, v, i, j, t) {
    n = split(list, v, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
  END { for (b in batches) printf "%5s | %13.1f | %16.1f | %.2f\n", b, med(ours[b]), med(theirs[b]), med(ours[b]) / med(theirs[b]) }
' "$log" | sort -n
