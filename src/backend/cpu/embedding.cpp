// CPU kernels for the token + position embedding.  The backward scatters rows into the tables;
// repeated ids would race if split over tokens, so it splits over column blocks instead: each
// column of a table is updated by one thread, tokens in order, so results are deterministic.
#include "backend/cpu/embedding.h"

#include <algorithm>

namespace mt::cpu {

namespace {

constexpr int64_t kColBlock = 32;

// Throws (outside any parallel region) naming the first id in ids[b, s] outside [0, limit).
void check_ids(const TensorView& ids, int64_t limit, const char* op, const char* name, const char* table) {
  const int32_t* p = ids.i32();
  const int64_t n = ids.numel(), s = ids.dim(1);
  for (int64_t k = 0; k < n; ++k)
    if (p[k] < 0 || p[k] >= limit)
      MT_FAIL() << op << ": " << name << "[" << k / s << ", " << k % s << "] = " << p[k] << " is out of range [0, "
                << limit << ") of " << table;
}

}  // namespace

void embedding_fwd(const TensorView& out, const TensorView& tokens, const TensorView& positions,
                   const TensorView& word, const TensorView& pos_table, int64_t vocab_start, int64_t vocab_total) {
  const char* op = "embedding_fwd";
  const int64_t b = tokens.dim(0), s = tokens.dim(1), h = word.dim(1), rows = word.dim(0);
  const bool use_pos = !pos_table.empty(), explicit_pos = use_pos && !positions.empty();
  check_ids(tokens, vocab_total, op, "tokens", "the word embedding (vocabulary size)");
  if (explicit_pos) check_ids(positions, pos_table.dim(0), op, "positions", "the position embedding");
  const int32_t* tok = tokens.i32();
  const int32_t* pos = explicit_pos ? positions.i32() : nullptr;
  const float* w = word.f32();
  const float* pt = use_pos ? pos_table.f32() : nullptr;
  float* y_all = out.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < s * b; ++r) {
    const int64_t i = r / b, j = r % b;  // out row r = (i, j); ids are [b, s]
    const int64_t id = static_cast<int64_t>(tok[j * s + i]) - vocab_start;
    float* y = y_all + r * h;
    if (id >= 0 && id < rows) {
      const float* wr = w + id * h;
#pragma omp simd
      for (int64_t c = 0; c < h; ++c) y[c] = wr[c];
    } else {
      std::fill(y, y + h, 0.0f);  // another shard's id
    }
    if (pt) {
      const float* pr = pt + (pos ? static_cast<int64_t>(pos[j * s + i]) : i) * h;
#pragma omp simd
      for (int64_t c = 0; c < h; ++c) y[c] += pr[c];
    }
  }
}

void embedding_bwd(const TensorView& dword, const TensorView& dpos_table, const TensorView& dout,
                   const TensorView& tokens, const TensorView& positions, int64_t vocab_start, int64_t vocab_total) {
  const char* op = "embedding_bwd";
  const int64_t b = tokens.dim(0), s = tokens.dim(1), h = dword.dim(1), rows = dword.dim(0);
  const bool use_pos = !dpos_table.empty(), explicit_pos = use_pos && !positions.empty();
  check_ids(tokens, vocab_total, op, "tokens", "the word embedding (vocabulary size)");
  if (explicit_pos) check_ids(positions, dpos_table.dim(0), op, "positions", "the position embedding");
  const int32_t* tok = tokens.i32();
  const int32_t* pos = explicit_pos ? positions.i32() : nullptr;
  const float* dy_all = dout.f32();
  float* dw = dword.f32();
  float* dp = use_pos ? dpos_table.f32() : nullptr;
  const int64_t blocks = (h + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, nc = std::min(kColBlock, h - c0);
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < b; ++j) {
        const float* dy = dy_all + (i * b + j) * h + c0;
        const int64_t id = static_cast<int64_t>(tok[j * s + i]) - vocab_start;
        if (id >= 0 && id < rows) {
          float* dwr = dw + id * h + c0;
#pragma omp simd
          for (int64_t c = 0; c < nc; ++c) dwr[c] += dy[c];
        }
        if (dp) {
          float* dpr = dp + (pos ? static_cast<int64_t>(pos[j * s + i]) : i) * h + c0;
#pragma omp simd
          for (int64_t c = 0; c < nc; ++c) dpr[c] += dy[c];
        }
      }
  }
}

}  // namespace mt::cpu
