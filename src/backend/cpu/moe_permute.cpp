// CPU kernels for the MoE permute/unpermute ops: the row index from the routing map, gathers of
// token rows, and the scatter-adds back into tokens.
//
// Every scatter (unpermute, permute's backward) is split over column blocks rather than rows: each
// thread owns a slice of every token's hidden vector and walks the rows in order, so no two threads
// write one element and each token's sum runs in row order on any thread count.
#include "backend/cpu/moe_experts.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace mt::cpu {

namespace {

constexpr int64_t kColumnBlock = 64;  // floats per thread-owned slice: one 256-byte run per row

// Row offsets of each expert's group (E + 1 entries) from the counts, checked against R.
std::vector<int64_t> expert_offsets(const TensorView& tokens_per_expert, int64_t rows, const char* op) {
  const int64_t experts = tokens_per_expert.dim(0);
  const int32_t* n = tokens_per_expert.i32();
  std::vector<int64_t> offsets(static_cast<size_t>(experts + 1), 0);
  for (int64_t e = 0; e < experts; ++e) {
    MT_CHECK(n[e] >= 0) << op << ": tokens_per_expert[" << e << "] = " << n[e] << " is negative";
    offsets[e + 1] = offsets[e] + n[e];
  }
  MT_CHECK(offsets[experts] == rows) << op << ": tokens_per_expert sums to " << offsets[experts] << " but there are "
                                     << rows << " permuted rows";
  return offsets;
}

void check_row_tokens(const TensorView& row_token, int64_t tokens, const char* op) {
  const int32_t* idx = row_token.i32();
  for (int64_t r = 0; r < row_token.dim(0); ++r)
    MT_CHECK(idx[r] >= 0 && idx[r] < tokens)
        << op << ": row_token[" << r << "] = " << idx[r] << " is outside [0, " << tokens << ")";
}

// out[row_token[r]] += w_r · src[r] for r in order (w_r = 1 when weights is null), out [T, h] and
// src [R, h]; weights [R] when given.
void scatter_add_rows(float* out, const float* src, const int32_t* row_token, const float* weights, int64_t rows,
                      int64_t hidden) {
  const int64_t blocks = (hidden + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColumnBlock, width = std::min(kColumnBlock, hidden - c0);
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = out + row_token[r] * hidden + c0;
      const float* s = src + r * hidden + c0;
      const float w = weights ? weights[r] : 1.0f;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) dst[c] += w * s[c];
    }
  }
}

// p_r for every row (1 when routing_probs is empty): routing_probs[row_token[r], e(r)].
std::vector<float> row_weights(const TensorView& routing_probs, const int32_t* row_token,
                               const std::vector<int64_t>& offsets) {
  std::vector<float> w(static_cast<size_t>(offsets.back()), 1.0f);
  if (routing_probs.empty()) return w;
  const int64_t experts = static_cast<int64_t>(offsets.size()) - 1;
  const float* probs = routing_probs.f32();
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) w[r] = probs[row_token[r] * experts + e];
  return w;
}

}  // namespace

int64_t moe_permuted_rows(const TensorView& routing_map) {
  const uint8_t* map = routing_map.u8();
  int64_t count = 0;
#pragma omp parallel for simd reduction(+ : count) schedule(static)
  for (int64_t i = 0; i < routing_map.numel(); ++i) count += map[i] != 0;
  return count;
}

void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map) {
  const int64_t t_count = routing_map.dim(0), experts = routing_map.dim(1), hidden = tokens.dim(1);
  const uint8_t* map = routing_map.u8();
  int32_t* counts = tokens_per_expert.i32();
  // Column e of the map, walked per expert: T·E bytes in all, small beside the rows it orders.
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < experts; ++e) {
    int32_t n = 0;
    for (int64_t t = 0; t < t_count; ++t) n += map[t * experts + e] != 0;
    counts[e] = n;
  }
  const std::vector<int64_t> offsets = expert_offsets(tokens_per_expert, rows.dim(0), "moe_permute_fwd");
  int32_t* idx = row_token.i32();
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < experts; ++e) {
    int64_t r = offsets[e];
    for (int64_t t = 0; t < t_count; ++t)
      if (map[t * experts + e]) idx[r++] = static_cast<int32_t>(t);
  }
  const float* src = tokens.f32();
  float* dst = rows.f32();
  const int64_t r_count = rows.dim(0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < r_count; ++r)
    std::memcpy(dst + r * hidden, src + idx[r] * hidden, static_cast<size_t>(hidden) * sizeof(float));
}

void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token) {
  check_row_tokens(row_token, dtokens.dim(0), "moe_permute_bwd");
  scatter_add_rows(dtokens.f32(), drows.f32(), row_token.i32(), nullptr, drows.dim(0), drows.dim(1));
}

void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs) {
  const char* op = "moe_unpermute_fwd";
  check_row_tokens(row_token, out.dim(0), op);
  const std::vector<int64_t> offsets = expert_offsets(tokens_per_expert, rows.dim(0), op);
  const std::vector<float> w = row_weights(routing_probs, row_token.i32(), offsets);
  std::memset(out.data, 0, out.bytes());
  scatter_add_rows(out.f32(), rows.f32(), row_token.i32(), w.data(), rows.dim(0), rows.dim(1));
}

void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs) {
  const char* op = "moe_unpermute_bwd";
  check_row_tokens(row_token, dout.dim(0), op);
  const std::vector<int64_t> offsets = expert_offsets(tokens_per_expert, rows.dim(0), op);
  const std::vector<float> w = row_weights(routing_probs, row_token.i32(), offsets);
  const int64_t experts = tokens_per_expert.dim(0), hidden = rows.dim(1);
  const int32_t* idx = row_token.i32();
  const float* dy = dout.f32();
  const float* x = rows.f32();
  float* dx = drows.f32();
  float* dp = drouting_probs.empty() ? nullptr : drouting_probs.f32();
  std::vector<int32_t> row_expert(static_cast<size_t>(rows.dim(0)));
  for (int64_t e = 0; e < experts; ++e)
    std::fill(row_expert.begin() + offsets[e], row_expert.begin() + offsets[e + 1], static_cast<int32_t>(e));
  // Rows are independent: each writes its own drows row and its own (token, expert) probability.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows.dim(0); ++r) {
    const float* g = dy + idx[r] * hidden;
    float* d = dx + r * hidden;
    const float p = w[r];
#pragma omp simd
    for (int64_t c = 0; c < hidden; ++c) d[c] += p * g[c];
    if (!dp) continue;
    const float* v = x + r * hidden;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < hidden; ++c) acc += static_cast<double>(v[c]) * g[c];
    dp[idx[r] * experts + row_expert[r]] += static_cast<float>(acc);
  }
}

}  // namespace mt::cpu
