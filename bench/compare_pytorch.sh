#!/usr/bin/env bash
# bench/compare_pytorch.sh: our training step against PyTorch eager, same machine, same run.
#
#   bench/compare_pytorch.sh [tiny|small|gpt2-124m[:R] ...] [--iters N] [--warmup N]
#
# A config written CONFIG:R runs ours with full recomputation of its first R layers
# (train_throughput --recompute-block R); PyTorch never recomputes.
# For each config (default: all three) runs ours ($BUILD_DIR/bench/train_throughput CONFIG) and the
# PyTorch baseline (bench/pytorch_baseline.py CONFIG) alternately, twice each (ours, pytorch, ours,
# pytorch), so that drift of a shared, noisy machine falls on both sides. Each run is its own process,
# so peak RSS is per config. Prints every raw line, then a table: the median over the two runs of each
# side's tokens/s (each run already reports the median over its measured iterations), the speed ratio
# ours/pytorch, the peak RSS of each side (the larger of its two runs) and the RSS ratio ours/pytorch.
#
# Environment: BUILD_DIR (default build, relative to the repository root), PYTHON (default
# /usr/bin/python3: Debian's torch, not a pyenv python), OMP_NUM_THREADS (default 2, used by both),
# ROUNDS (default 2). --iters/--warmup are passed to both sides (defaults: theirs, 5 and 2).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-2}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

configs=()
iter_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --iters | --warmup)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; exit 2; }
      iter_args+=("$1" "$2")
      shift 2
      ;;
    tiny | small | gpt2-124m | tiny:* | small:* | gpt2-124m:*)
      [[ $1 =~ ^[a-z0-9-]+(:[0-9]+)?$ ]] || { echo "bad config '$1': CONFIG:R needs a layer count R" >&2; exit 2; }
      configs+=("$1")
      shift
      ;;
    -h | --help)
      sed -n '2,17p' "$0"
      exit 0
      ;;
    *)
      echo "unknown argument '$1' (configs: tiny small gpt2-124m; options: --iters N --warmup N)" >&2
      exit 2
      ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(tiny small gpt2-124m)

ours_bin="$BUILD_DIR/bench/train_throughput"
[ -x "$ours_bin" ] || { echo "no $ours_bin: build it first (or set BUILD_DIR)" >&2; exit 1; }
[ -x "$PYTHON" ] || { echo "no python at $PYTHON (set PYTHON)" >&2; exit 1; }

source bench/line_fields.sh

echo "compare_pytorch: ours=$ours_bin pytorch=$PYTHON bench/pytorch_baseline.py, OMP_NUM_THREADS=$OMP_NUM_THREADS," \
  "$ROUNDS rounds (ours, pytorch alternating), ${iter_args[*]:-default iterations}; $(date -u +%FT%TZ), $(nproc) CPUs," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"

rows=()
for cfg in "${configs[@]}"; do
  ours_tps=() ours_rss=() pt_tps=() pt_rss=()
  model=${cfg%%:*}
  recompute=0
  [ "$model" = "$cfg" ] || recompute=${cfg#*:}
  for ((round = 1; round <= ROUNDS; ++round)); do
    line=$("$ours_bin" "$model" --recompute-block "$recompute" ${iter_args[@]+"${iter_args[@]}"} | grep -E "^$model ")
    echo "ours       $line"
    ours_tps+=("$(field tps "$line")") ours_rss+=("$(field rss "$line")")
    line=$("$PYTHON" bench/pytorch_baseline.py "$model" ${iter_args[@]+"${iter_args[@]}"} | grep -E '^pytorch ')
    echo "$line"
    pt_tps+=("$(field tps "$line")") pt_rss+=("$(field rss "$line")")
  done
  rows+=("$cfg $(median "${ours_tps[@]}") $(median "${pt_tps[@]}") $(maximum "${ours_rss[@]}") $(maximum "${pt_rss[@]}")")
done

echo
printf '%-12s | %12s | %15s | %11s | %13s | %16s | %9s\n' config "ours tok/s" "pytorch tok/s" "speed ratio" \
  "ours peak RSS" "pytorch peak RSS" "RSS ratio"
printf '%s\n' "-------------+--------------+-----------------+-------------+---------------+------------------+----------"
for row in "${rows[@]}"; do
  # shellcheck disable=SC2086
  set -- $row
  awk -v c="$1" -v ot="$2" -v pt="$3" -v orss="$4" -v prss="$5" 'BEGIN {
    printf "%-12s | %12.0f | %15.0f | %10.2fx | %9.2f GiB | %12.2f GiB | %8.2fx\n", c, ot, pt, ot / pt, orss, prss, orss / prss
  }'
done
echo "speed ratio = ours tokens/s / pytorch tokens/s (>1: ours faster); RSS ratio = ours / pytorch (<1: ours smaller);" \
  "CONFIG:R = ours with full recomputation of R layers"
