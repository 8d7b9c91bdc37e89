#!/usr/bin/env bash
# bench/compare_commits.sh: the training step built from two commits, same machine, same run.
#
#   bench/compare_commits.sh BASE [tiny|small|gpt2-124m ...] [--iters N] [--warmup N]
#
# Builds bench/train_throughput from commit BASE (in a temporary git worktree, tests off) and uses
# the working tree's own build ($BUILD_DIR, default build) as the other side; then for each config
# (default: tiny and gpt2-124m) runs base and head alternately, ROUNDS times each (default 3), so
# drift of a shared, noisy machine falls on both sides. Each run is its own process (peak RSS is
# per config). Prints every raw line, then per config the median tokens/s and the largest peak RSS
# of each side, and the ratios head/base. For refactors that must cost no speed or memory.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
ROUNDS=${ROUNDS:-3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

[ $# -ge 1 ] && [ "${1#-}" = "$1" ] || { sed -n '2,12p' "$0"; exit 2; }
base_rev=$(git rev-parse --verify "$1^{commit}") || { echo "no commit '$1'" >&2; exit 2; }
shift
configs=()
iter_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --iters | --warmup)
      [ $# -ge 2 ] || { echo "$1 needs a value" >&2; exit 2; }
      iter_args+=("$1" "$2")
      shift 2
      ;;
    tiny | small | gpt2-124m) configs+=("$1"); shift ;;
    *) echo "unknown argument '$1' (configs: tiny small gpt2-124m; options: --iters N --warmup N)" >&2; exit 2 ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(tiny gpt2-124m)

head_bin="$BUILD_DIR/bench/train_throughput"
[ -x "$head_bin" ] || { echo "no $head_bin: build the working tree first (scripts/build.sh)" >&2; exit 1; }

work=$(mktemp -d)
trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/src" "$base_rev" >/dev/null
echo "building train_throughput at ${base_rev:0:12} ..."
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DMT_BUILD_TESTS=OFF >/dev/null
cmake --build "$work/build" --target train_throughput -j "$(nproc)" >/dev/null
base_bin="$work/build/bench/train_throughput"

source bench/line_fields.sh

echo "compare_commits: base ${base_rev:0:12} vs head $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD || echo '+changes')," \
  "OMP_NUM_THREADS=$OMP_NUM_THREADS, $ROUNDS rounds (base, head alternating), ${iter_args[*]:-default iterations};" \
  "$(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
rows=()
for cfg in "${configs[@]}"; do
  base_tps=() base_rss=() head_tps=() head_rss=()
  for ((round = 1; round <= ROUNDS; ++round)); do
    line=$("$base_bin" "$cfg" ${iter_args[@]+"${iter_args[@]}"} | grep -E "^$cfg ")
    echo "base  $line"
    base_tps+=("$(field tps "$line")") base_rss+=("$(field rss "$line")")
    line=$("$head_bin" "$cfg" ${iter_args[@]+"${iter_args[@]}"} | grep -E "^$cfg ")
    echo "head  $line"
    head_tps+=("$(field tps "$line")") head_rss+=("$(field rss "$line")")
  done
  rows+=("$cfg $(median "${base_tps[@]}") $(median "${head_tps[@]}") $(maximum "${base_rss[@]}") $(maximum "${head_rss[@]}")")
done

echo
printf '%-10s | %11s | %11s | %10s | %13s | %13s | %9s\n' config "base tok/s" "head tok/s" "speed" "base peak RSS" \
  "head peak RSS" "RSS"
printf '%s\n' "-----------+-------------+-------------+------------+---------------+---------------+----------"
for row in "${rows[@]}"; do
  # shellcheck disable=SC2086
  set -- $row
  awk -v c="$1" -v bt="$2" -v ht="$3" -v brss="$4" -v hrss="$5" 'BEGIN {
    printf "%-10s | %11.0f | %11.0f | %9.3fx | %9.3f GiB | %9.3f GiB | %8.3fx\n", c, bt, ht, ht / bt, brss, hrss, hrss / brss
  }'
done
echo "speed = head tokens/s / base tokens/s (medians); RSS = head / base (largest of the runs)"
