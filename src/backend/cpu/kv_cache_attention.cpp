// CPU kernels of the KV-cache ops: each new token's keys and values copied into its cache slot,
// and each (token, query head) attending over its slot's keys 0..position with an online softmax
// (one pass over the cache, the output row itself as the accumulator: no scratch). The work is
// spread over (token, head) pairs; decoding reads each cached key and value once per query head.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/attention.h"
#include "backend/math/attention_math.h"

namespace mt::cpu {

namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMinWork = int64_t{1} << 18;

float dot(const float* a, const float* b, int64_t d) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < d; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

void kv_cache_write(const TensorView& k_cache, const TensorView& v_cache, const TensorView& k, const TensorView& v,
                    const TensorView& slots, const TensorView& positions) {
  const int64_t g = k.dim(1), tokens = k.dim(2), d = k.dim(3), max_len = k_cache.dim(2);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < g; ++h) {
      const int64_t at = ((slots.i32()[t] * g + h) * max_len + positions.i32()[t]) * d;
      std::memcpy(k_cache.f32() + at, k.f32() + (h * tokens + t) * d, d * sizeof(float));
      std::memcpy(v_cache.f32() + at, v.f32() + (h * tokens + t) * d, d * sizeof(float));
    }
}

void kv_cache_attention_fwd(const TensorView& out, const TensorView& q, const TensorView& k_cache,
                            const TensorView& v_cache, const TensorView& slots, const TensorView& positions,
                            float scale) {
  const int64_t n = q.dim(1), tokens = q.dim(2), d = q.dim(3);
  const int64_t g = k_cache.dim(1), max_len = k_cache.dim(2), per_group = n / g;
  int64_t work = 0;
  for (int64_t t = 0; t < tokens; ++t) work += (positions.i32()[t] + 1) * n * d;
#pragma omp parallel for schedule(dynamic, 4) if (work >= kParallelMinWork)
  for (int64_t task = 0; task < tokens * n; ++task) {
    const int64_t t = task / n, h = task % n;
    const float* query = q.f32() + (h * tokens + t) * d;
    const int64_t base = (slots.i32()[t] * g + h / per_group) * max_len * d;
    const float* keys = k_cache.f32() + base;
    const float* values = v_cache.f32() + base;
    float* acc = out.f32() + t * n * d + h * d;
    std::fill(acc, acc + d, 0.0f);
    float running_max = -std::numeric_limits<float>::infinity(), sum = 0.0f;
    for (int64_t p = 0; p <= positions.i32()[t]; ++p) {
      const float score = scale * dot(query, keys + p * d, d);
      if (score > running_max) {  // rescale what is accumulated to the new maximum
        const float correction = online_softmax_rescale(running_max, score);
        sum *= correction;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) acc[i] *= correction;
        running_max = score;
      }
      const float w = online_softmax_rescale(score, running_max);  // exp(score − max)
      sum += w;
      const float* value = values + p * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) acc[i] += w * value[i];
    }
    const float inv = 1.0f / sum;
    for (int64_t i = 0; i < d; ++i) acc[i] *= inv;
  }
}

}  // namespace mt::cpu
