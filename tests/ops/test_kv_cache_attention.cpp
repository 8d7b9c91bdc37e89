// Tests ops/attention.h's KV-cache ops: rows from several slots at scattered positions against an
// fp64 reference of the formula; a whole sequence through the cache against the training
// attention (attention_fwd, causal); a prefix cached then extended token by token against the
// same; and the refusals (slot or position out of range).
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "testing.h"

namespace mt {
namespace {

using test::HostTensor;
using test::randn;
using test::zeros;

HostTensor ints(std::vector<int32_t> values) {
  HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.i32());
  return t;
}

TEST(KvCacheAttention, RowsFromSeveralSlotsMatchTheReference) {
  const int64_t slots = 3, g = 2, n = 4, P = 12, d = 8, T = 5;
  HostTensor k_cache = randn({slots, g, P, d}, 1), v_cache = randn({slots, g, P, d}, 2);
  HostTensor q = randn({1, n, T, d}, 3), k = randn({1, g, T, d}, 4), v = randn({1, g, T, d}, 5);
  // Two prefill rows of slot 2 (positions 0, 1), decode rows of slots 0 and 1, a late row of slot 0.
  HostTensor slot = ints({2, 2, 0, 1, 0}), pos = ints({0, 1, 7, 3, 11});
  kv_cache_write(k_cache.view(), v_cache.view(), k.view(), v.view(), slot.view(), pos.view());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < g; ++h)
      for (int64_t i = 0; i < d; ++i) {
        const int64_t at = ((slot.i32()[t] * g + h) * P + pos.i32()[t]) * d + i;
        ASSERT_EQ(k_cache.f32()[at], k.f32()[(h * T + t) * d + i]);
        ASSERT_EQ(v_cache.f32()[at], v.f32()[(h * T + t) * d + i]);
      }
  HostTensor out = zeros({T, n * d});
  const float scale = 0.35f;
  kv_cache_attention_fwd(out.view(), q.view(), k_cache.view(), v_cache.view(), slot.view(), pos.view(), scale);
  std::vector<double> want(static_cast<size_t>(T * n * d));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t hq = 0; hq < n; ++hq) {
      const int64_t base = (slot.i32()[t] * g + hq / (n / g)) * P * d;
      std::vector<double> w;
      double mx = -1e300, sum = 0.0;
      for (int64_t p = 0; p <= pos.i32()[t]; ++p) {
        double s = 0.0;
        for (int64_t i = 0; i < d; ++i) s += double(q.f32()[(hq * T + t) * d + i]) * k_cache.f32()[base + p * d + i];
        w.push_back(s * scale);
        mx = std::max(mx, w.back());
      }
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0.0;
        for (size_t p = 0; p < w.size(); ++p) acc += w[p] / sum * v_cache.f32()[base + p * d + i];
        want[(t * n + hq) * d + i] = acc;
      }
    }
  test::expect_close(out.f32(), want, 1e-6, 1e-5, "kv_cache_attention_fwd");
}

// A sequence of s tokens through the cache (all at once, then again as a prefix of 4 and one
// token per step) equals the training attention's causal output.
TEST(KvCacheAttention, PrefillAndDecodeEqualCausalAttention) {
  const int64_t g = 2, n = 6, s = 9, d = 16, P = 16;
  HostTensor q = randn({1, n, s, d}, 11), k = randn({1, g, s, d}, 12), v = randn({1, g, s, d}, 13);
  HostTensor want = zeros({s, 1, n * d}), lse = zeros({1, n, s});
  AttentionOptions o;
  o.scale = 0.25f;
  attention_fwd(want.view(), lse.view(), q.view(), k.view(), v.view(), o);
  std::vector<double> reference(want.f32(), want.f32() + want.numel());

  HostTensor k_cache = zeros({2, g, P, d}), v_cache = zeros({2, g, P, d});
  std::vector<int32_t> all(s), slot1(s, 1);
  for (int64_t i = 0; i < s; ++i) all[i] = static_cast<int32_t>(i);
  HostTensor slots = ints(slot1), positions = ints(all), out = zeros({s, n * d});
  kv_cache_write(k_cache.view(), v_cache.view(), k.view(), v.view(), slots.view(), positions.view());
  kv_cache_attention_fwd(out.view(), q.view(), k_cache.view(), v_cache.view(), slots.view(), positions.view(), o.scale);
  test::expect_close(out.f32(), reference, 1e-6, 1e-5, "prefill");

  // Slot 0: prefix of 4, then one token per step; each step reads back the rows so far.
  HostTensor step_out = zeros({s, n * d});
  const auto rows = [&](const HostTensor& x, int64_t heads, int64_t first, int64_t count) {
    HostTensor r = zeros({1, heads, count, d});
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(x.bytes.data() + ((h * s + first) * d) * 4, count * d * 4, r.bytes.data() + h * count * d * 4);
    return r;
  };
  for (int64_t first = 0; first < s;) {
    const int64_t count = first == 0 ? 4 : 1;
    HostTensor qs = rows(q, n, first, count), ks = rows(k, g, first, count), vs = rows(v, g, first, count);
    std::vector<int32_t> p(count), zero(count, 0);
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<int32_t>(first + i);
    HostTensor sl = ints(zero), ps = ints(p), o_step = zeros({count, n * d});
    kv_cache_write(k_cache.view(), v_cache.view(), ks.view(), vs.view(), sl.view(), ps.view());
    kv_cache_attention_fwd(o_step.view(), qs.view(), k_cache.view(), v_cache.view(), sl.view(), ps.view(), o.scale);
    std::copy_n(o_step.f32(), count * n * d, step_out.f32() + first * n * d);
    first += count;
  }
  test::expect_close(step_out.f32(), reference, 1e-6, 1e-5, "prefix, then decode");
}

TEST(KvCacheAttention, RejectsRowsOutsideTheCache) {
  const int64_t g = 1, n = 2, P = 4, d = 4;
  HostTensor k_cache = zeros({2, g, P, d}), v_cache = zeros({2, g, P, d});
  HostTensor q = randn({1, n, 1, d}, 1), k = randn({1, g, 1, d}, 2), v = randn({1, g, 1, d}, 3), out = zeros({1, n * d});
  HostTensor ok = ints({0}), bad_slot = ints({2}), beyond = ints({4});
  test::expect_error_mentioning(
      [&] { kv_cache_write(k_cache.view(), v_cache.view(), k.view(), v.view(), bad_slot.view(), ok.view()); },
      "cache slot 2 of 2");
  test::expect_error_mentioning(
      [&] { kv_cache_attention_fwd(out.view(), q.view(), k_cache.view(), v_cache.view(), ok.view(), beyond.view(), 1.0f); },
      "position 4, beyond the cache's 4");
}

}  // namespace
}  // namespace mt
