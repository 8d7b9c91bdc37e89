// Owns SeqRows: the positions a context-parallel shard's rows hold in their sequences, shared by the
// attention and dropout arguments (backend/attention_args.h, backend/dropout_args.h) and every
// backend's kernels.
#pragma once

#include <cstdint>
#include <limits>

#include "base/hd.h"

namespace mt {

// Where the rows of a tensor sit in their sequences (the rows of q, or of k and v, in attention; the
// positions of a residual-stream shard for dropout). A context-parallel shard holds one or
// two runs of consecutive positions: rows 0 .. split − 1 at positions first, first + 1, ..., rows
// split, split + 1, ... at positions second, second + 1, ...; positions increase (second >=
// first + split), so the keys a query sees are always a prefix of the key rows. The default is
// the identity (row i at position i), every attention outside context parallelism.
struct SeqRows {
  int64_t first = 0;
  int64_t split = std::numeric_limits<int64_t>::max();  // rows in the first run
  int64_t second = 0;                                   // position of row `split`

  static SeqRows run(int64_t first) { return {first, std::numeric_limits<int64_t>::max(), 0}; }
  static SeqRows runs(int64_t first, int64_t split, int64_t second) { return {first, split, second}; }
  MT_HD int64_t position(int64_t i) const { return i < split ? first + i : second + (i - split); }
  // How many of `rows` rows have position <= p (a prefix).
  MT_HD int64_t visible(int64_t p, int64_t rows) const {
    const int64_t in_first = rows < split ? rows : split;
    int64_t n = p - first + 1;
    n = n < 0 ? 0 : (n > in_first ? in_first : n);
    if (rows <= split || n < in_first) return n;
    int64_t m = p - second + 1;
    m = m < 0 ? 0 : (m > rows - split ? rows - split : m);
    return n + m;
  }
  bool identity(int64_t rows) const { return first == 0 && (rows <= split || second == split); }
};

}  // namespace mt
