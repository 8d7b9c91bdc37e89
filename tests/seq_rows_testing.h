// Test helpers for context parallelism: the rows of a whole-sequence tensor that a shard holds
// (AttentionOptions's SeqRows), in the attention ops' layouts.
#pragma once

#include "backend/attention_args.h"
#include "testing.h"

namespace mt::test {

// Rows `rows` (count of them) of a head-major [b, heads, S, d] tensor, as [b, heads, count, d].
inline HostTensor take_heads(HostTensor& full, const SeqRows& rows, int64_t count) {
  const int64_t bh = full.shape[0] * full.shape[1], s = full.shape[2], d = full.shape[3];
  HostTensor out = zeros({full.shape[0], full.shape[1], count, d});
  for (int64_t jh = 0; jh < bh; ++jh)
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < d; ++c)
        out.f32()[(jh * count + i) * d + c] = full.f32()[(jh * s + rows.position(i)) * d + c];
  return out;
}

// The same rows of a sequence-major [S, b, w] tensor, as [count, b, w].
inline HostTensor take_seq(HostTensor& full, const SeqRows& rows, int64_t count) {
  const int64_t width = full.shape[1] * full.shape[2];
  HostTensor out = zeros({count, full.shape[1], full.shape[2]});
  for (int64_t i = 0; i < count; ++i)
    for (int64_t e = 0; e < width; ++e) out.f32()[i * width + e] = full.f32()[rows.position(i) * width + e];
  return out;
}

// The rows of lse [b, n, S], as [b, n, count] (f64).
inline std::vector<double> take_lse(HostTensor& full, const SeqRows& rows, int64_t count) {
  const int64_t bn = full.shape[0] * full.shape[1], s = full.shape[2];
  std::vector<double> out(static_cast<size_t>(bn * count));
  for (int64_t jh = 0; jh < bn; ++jh)
    for (int64_t i = 0; i < count; ++i) out[jh * count + i] = full.f32()[jh * s + rows.position(i)];
  return out;
}

}  // namespace mt::test
