# bench/line_fields.sh: sourced by the comparison scripts. Reads figures out of the benchmarks'
# result lines and summarises repeated runs.

# field tps|rss LINE: the number before "tokens/s", or after "peak RSS".
field() {
  awk -v what="$1" '{
    for (i = 1; i <= NF; ++i) {
      if (what == "tps" && $i == "tokens/s") { print $(i - 1); exit }
      if (what == "rss" && $i == "peak" && $(i + 1) == "RSS") { print $(i + 2); exit }
    }
  }' <<<"$2"
}

# median / maximum of the numbers given as arguments
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
maximum() { printf '%s\n' "$@" | sort -g | tail -n 1; }
