// Device cases of ops/attention.h against the CPU backend: RoPE tables, the QKV split with and
// without RoPE (and with positions, part of each head rotated, interleaved pairs), the lean
// (flash) and probs attention forward and backward (causal, GQA/MQA, dropout with tensor-parallel
// head offsets, document key starts, head dims and sequence lengths off the tile sizes, s = 1),
// the backward's run-to-run determinism, the log-sum-exp merge of partial attentions, and the KV
// cache write and decoding attention.
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/guard.h"
#include "device_testing.h"
#include "ops/attention.h"
#if MT_HAVE_CUDA
#include "backend/cuda/ops.h"
#endif

namespace mt::test {
namespace {

// f32 tolerances for CUDA. The element arithmetic is the CPU's (backend/math/attention_math.h);
// sums run in another order and FMAs may be contracted differently.
constexpr double kSplitTol = 1e-6;
constexpr double kFwdAtol = 2e-5, kFwdRtol = 1e-4;
constexpr double kBwdAtol = 1e-4, kBwdRtol = 1e-3;

struct Heads {
  int64_t b, n, g, s, d;
};

std::string name_of(const Heads& h) {
  return "b" + std::to_string(h.b) + " n" + std::to_string(h.n) + " g" + std::to_string(h.g) + " s" +
         std::to_string(h.s) + " d" + std::to_string(h.d);
}

// Tables of `half` columns for rotary dim r (0: 2·half).
HostTensor rope_cos_sin(int64_t positions, int64_t half, bool sin_table, int64_t r = 0) {
  HostTensor c = zeros({positions, half}), s = zeros({positions, half});
  rope_tables(c.view(), s.view(), 10000.0, r);
  return sin_table ? s : c;
}

// Key starts of documents beginning at the given indices (the same list for every sequence, shifted
// by the sequence index so the batches differ).
HostTensor doc_key_starts(int64_t b, int64_t s, const std::vector<int64_t>& starts) {
  HostTensor ks(DType::i32, {b, s});
  for (int64_t j = 0; j < b; ++j) {
    int64_t start = 0;
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t d : starts)
        if (d + j == i) start = i;
      ks.i32()[j * s + i] = static_cast<int32_t>(start);
    }
  }
  return ks;
}

TEST(DeviceAttention, RopeTables) {
  for (const double base : {10000.0, 500000.0})
    for (const auto& [positions, half, r] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 0}, {37, 24, 0}, {300, 64, 0}, {37, 3, 5}, {50, 8, 16}}) {
      DeviceCase dev;
      HostTensor c = zeros({positions, half}), s = zeros({positions, half});
      rope_tables(c.view(), s.view(), base, r);  // r: --rotary-percent's rotary dim (5: odd)
      const TensorView dc = dev.poisoned(DType::f32, {positions, half}), ds = dev.poisoned(DType::f32, {positions, half});
      rope_tables(dc, ds, base, r);
      // Double-precision angles rounded once; libm and CUDA's double sin/cos may differ in the last bit.
      dev.expect_matches(dc, c, 1e-6, 0, "rope cos");
      dev.expect_matches(ds, s, 1e-6, 0, "rope sin");
    }
}

struct SplitCase {
  Heads h;
  bool rope, positions;
  int64_t rotary_dim = 0;  // 0: the whole head; else --rotary-percent's int(d · percent)
  bool interleaved = false;
};

TEST(DeviceAttention, QkvSplitRopeForwardBackward) {
  const std::vector<SplitCase> cases = {
      {{2, 4, 2, 13, 10}, false, false}, {{2, 4, 2, 13, 10}, true, false}, {{3, 6, 3, 9, 16}, true, true},
      {{1, 4, 1, 5, 7}, false, false},   {{1, 8, 1, 33, 64}, true, true},  {{1, 1, 1, 1, 2}, true, false},
      // --rotary-percent and --rotary-interleaved: part of each head rotated (odd rotary dims too).
      {{2, 4, 2, 13, 10}, true, false, 5, false}, {{2, 4, 2, 13, 10}, true, true, 5, true},
      {{3, 6, 3, 9, 16}, true, false, 16, true},  {{1, 8, 1, 33, 64}, true, true, 32, false},
      {{1, 4, 1, 5, 7}, true, false, 3, true}};
  uint64_t seed = 10;
  for (const SplitCase& c : cases) {
    SCOPED_TRACE(name_of(c.h) + (c.rope ? " rope" : "") + (c.positions ? " positions" : "") +
                 (c.rotary_dim ? " rotary dim " + std::to_string(c.rotary_dim) : "") + (c.interleaved ? " interleaved" : ""));
    const Heads& h = c.h;
    DeviceCase dev;
    const int64_t width = (h.n + 2 * h.g) * h.d, table = h.s + 3;
    const int64_t half = c.rotary_dim ? (c.rotary_dim + 1) / 2 : h.d / 2;
    const RopeForm form = c.interleaved ? RopeForm::interleaved : RopeForm::rotate_half;
    HostTensor qkv = randn({h.s, h.b, width}, ++seed);
    HostTensor cos_t = c.rope ? rope_cos_sin(table, half, false, c.rotary_dim) : HostTensor();
    HostTensor sin_t = c.rope ? rope_cos_sin(table, half, true, c.rotary_dim) : HostTensor();
    HostTensor pos = c.positions ? randint({h.b, h.s}, static_cast<int32_t>(table), ++seed) : HostTensor();
    const TensorView hc = c.rope ? cos_t.view() : TensorView(), hs = c.rope ? sin_t.view() : TensorView();
    const TensorView hp = c.positions ? pos.view() : TensorView();
    const TensorView dc = c.rope ? dev.upload(cos_t) : TensorView(), ds = c.rope ? dev.upload(sin_t) : TensorView();
    const TensorView dp = c.positions ? dev.upload(pos) : TensorView();

    HostTensor q = zeros({h.b, h.n, h.s, h.d}), k = zeros({h.b, h.g, h.s, h.d}), v = zeros({h.b, h.g, h.s, h.d});
    const TensorView dq = dev.poisoned(DType::f32, q.shape), dk = dev.poisoned(DType::f32, k.shape),
                     dv = dev.poisoned(DType::f32, v.shape);
    qkv_split_rope_fwd(q.view(), k.view(), v.view(), qkv.view(), hc, hs, hp, form);
    qkv_split_rope_fwd(dq, dk, dv, dev.upload(qkv), dc, ds, dp, form);
    dev.expect_matches(dq, q, kSplitTol, kSplitTol, "q");
    dev.expect_matches(dk, k, kSplitTol, kSplitTol, "k");
    dev.expect_matches(dv, v, 0, 0, "v (copied)");

    // Backward accumulates into dqkv.
    HostTensor gq = randn(q.shape, ++seed), gk = randn(k.shape, ++seed), gv = randn(v.shape, ++seed);
    HostTensor dqkv = randn(qkv.shape, ++seed);
    const TensorView ddqkv = dev.upload(dqkv);
    qkv_split_rope_bwd(dqkv.view(), gq.view(), gk.view(), gv.view(), hc, hs, hp, form);
    qkv_split_rope_bwd(ddqkv, dev.upload(gq), dev.upload(gk), dev.upload(gv), dc, ds, dp, form);
    dev.expect_matches(ddqkv, dqkv, kSplitTol, kSplitTol, "dqkv");
  }
}

TEST(DeviceAttention, QkvSplitRejectsBadPositions) {
  const Heads h{1, 2, 1, 4, 4};
  DeviceCase dev;
  HostTensor qkv = randn({h.s, h.b, (h.n + 2 * h.g) * h.d}, 3);
  HostTensor cos_t = rope_cos_sin(h.s, h.d / 2, false), sin_t = rope_cos_sin(h.s, h.d / 2, true);
  HostTensor pos(DType::i32, {h.b, h.s});
  for (int64_t i = 0; i < h.s; ++i) pos.i32()[i] = static_cast<int32_t>(i);
  pos.i32()[2] = static_cast<int32_t>(h.s);  // one past the tables
  EXPECT_THROW(qkv_split_rope_fwd(dev.poisoned(DType::f32, {h.b, h.n, h.s, h.d}),
                                  dev.poisoned(DType::f32, {h.b, h.g, h.s, h.d}),
                                  dev.poisoned(DType::f32, {h.b, h.g, h.s, h.d}), dev.upload(qkv), dev.upload(cos_t),
                                  dev.upload(sin_t), dev.upload(pos)),
               Error);
}

// ---- attention ---------------------------------------------------------------------------------

struct AttnCase {
  Heads h;
  float dropout = 0.0f;
  std::vector<int64_t> doc_starts;  // empty: plain causal
  int64_t head_offset = 0, total_heads = 0;
};

std::string name_of(const AttnCase& c) {
  std::string s = name_of(c.h);
  if (c.dropout > 0) s += " dropout " + std::to_string(c.dropout);
  if (!c.doc_starts.empty()) s += " documents";
  if (c.total_heads) s += " heads " + std::to_string(c.head_offset) + "/" + std::to_string(c.total_heads);
  return s;
}

AttnCase attn_case(Heads h, float dropout = 0.0f, std::vector<int64_t> doc_starts = {}, int64_t head_offset = 0,
                   int64_t total_heads = 0) {
  return AttnCase{h, dropout, std::move(doc_starts), head_offset, total_heads};
}

std::vector<AttnCase> attn_cases() {
  return {
      attn_case({1, 1, 1, 1, 8}),                                // one token
      attn_case({2, 4, 2, 37, 40}),                              // GQA, sizes off every tile
      attn_case({1, 4, 1, 70, 64}, 0.0f, {0, 9, 41}),            // MQA, documents, several key tiles
      attn_case({2, 2, 2, 33, 256}),                             // head dim 256
      attn_case({1, 3, 3, 130, 17}, 0.25f),                      // dropout, odd head dim, many tiles
      attn_case({2, 4, 2, 48, 32}, 0.1f, {0, 5, 20}, 4, 16),     // dropout with documents and a TP head offset
      attn_case({1, 2, 1, 65, 128}, 0.0f, {0, 16, 17, 64}),      // one-token documents, tile edges
  };
}

// Inputs of one case, on the host and the device.
struct AttnInputs {
  HostTensor q, k, v, dout, key_start;
  TensorView dq_, dk_, dv_, ddout, dkey_start;
  AttentionOptions host_opts, dev_opts;

  AttnInputs(DeviceCase& dev, const AttnCase& c, uint64_t seed) {
    const Heads& h = c.h;
    q = randn({h.b, h.n, h.s, h.d}, seed + 1);
    k = randn({h.b, h.g, h.s, h.d}, seed + 2);
    v = randn({h.b, h.g, h.s, h.d}, seed + 3);
    dout = randn({h.s, h.b, h.n * h.d}, seed + 4);
    dq_ = dev.upload(q);
    dk_ = dev.upload(k);
    dv_ = dev.upload(v);
    ddout = dev.upload(dout);
    host_opts.scale = 1.0f / std::sqrt(static_cast<float>(h.d));
    host_opts.dropout_p = c.dropout;
    host_opts.rng = RngStream{1234 + seed, 77};
    host_opts.head_offset = c.head_offset;
    host_opts.total_heads = c.total_heads;
    if (c.dropout > 0) host_opts.first_sample = 37;  // masks keyed by the global sample
    dev_opts = host_opts;
    if (!c.doc_starts.empty()) {
      key_start = doc_key_starts(h.b, h.s, c.doc_starts);
      host_opts.key_start = key_start.view();
      dev_opts.key_start = dev.upload(key_start);
    }
  }
};

TEST(DeviceAttention, LeanForwardBackward) {
  uint64_t seed = 100;
  for (const AttnCase& c : attn_cases()) {
    SCOPED_TRACE(name_of(c));
    const Heads& h = c.h;
    DeviceCase dev;
    AttnInputs in(dev, c, seed += 10);
    HostTensor out = zeros({h.s, h.b, h.n * h.d}), lse = zeros({h.b, h.n, h.s});
    const TensorView dout_ = dev.poisoned(DType::f32, out.shape), dlse = dev.poisoned(DType::f32, lse.shape);
    attention_fwd(out.view(), lse.view(), in.q.view(), in.k.view(), in.v.view(), in.host_opts);
    attention_fwd(dout_, dlse, in.dq_, in.dk_, in.dv_, in.dev_opts);
    dev.expect_matches(dout_, out, kFwdAtol, kFwdRtol, "out");
    dev.expect_matches(dlse, lse, kFwdAtol, kFwdRtol, "lse");

    // Backward accumulates into dq, dk, dv; the device run starts from the CPU's out and lse so
    // the comparison sees the backward alone.
    HostTensor gq = randn(in.q.shape, seed + 5), gk = randn(in.k.shape, seed + 6), gv = randn(in.v.shape, seed + 7);
    const TensorView dgq = dev.upload(gq), dgk = dev.upload(gk), dgv = dev.upload(gv);
    HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(h.b, h.n, h.s, h.d, 1))});
    const TensorView dws = dev.poisoned(
        DType::f32, {static_cast<int64_t>(attention_workspace_floats(h.b, h.n, h.s, h.d, 1, device_under_test()))});
    const TensorView dout_cpu = dev.upload(out), dlse_cpu = dev.upload(lse);
    attention_bwd(gq.view(), gk.view(), gv.view(), in.dout.view(), out.view(), lse.view(), in.q.view(), in.k.view(),
                  in.v.view(), in.host_opts, ws.view());
    attention_bwd(dgq, dgk, dgv, in.ddout, dout_cpu, dlse_cpu, in.dq_, in.dk_, in.dv_, in.dev_opts, dws);
    dev.expect_matches(dgq, gq, kBwdAtol, kBwdRtol, "dq");
    dev.expect_matches(dgk, gk, kBwdAtol, kBwdRtol, "dk");
    dev.expect_matches(dgv, gv, kBwdAtol, kBwdRtol, "dv");

    // Deterministic: a second device run from zeros gives the same bits twice.
    HostTensor z = zeros(in.q.shape), zk = zeros(in.k.shape);
    std::vector<HostTensor> runs;
    for (int rep = 0; rep < 2; ++rep) {
      const TensorView a = dev.upload(z), b = dev.upload(zk), cc = dev.upload(zk);
      attention_bwd(a, b, cc, in.ddout, dout_cpu, dlse_cpu, in.dq_, in.dk_, in.dv_, in.dev_opts, dws);
      runs.push_back(dev.download(a));
      runs.push_back(dev.download(b));
      runs.push_back(dev.download(cc));
    }
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(0, std::memcmp(runs[t].bytes.data(), runs[t + 3].bytes.data(), runs[t].bytes.size()))
          << "backward output " << t << " differs between two runs";
  }
}

TEST(DeviceAttention, ProbsForwardBackward) {
  uint64_t seed = 500;
  for (const AttnCase& c : attn_cases()) {
    SCOPED_TRACE(name_of(c));
    const Heads& h = c.h;
    DeviceCase dev;
    AttnInputs in(dev, c, seed += 10);
    const bool drop = c.dropout > 0;
    HostTensor out = zeros({h.s, h.b, h.n * h.d}), probs = zeros({h.b, h.n, h.s, h.s});
    HostTensor mask = drop ? zeros({h.b, h.n, h.s, h.s}, DType::u8) : HostTensor();
    const TensorView dout_ = dev.poisoned(DType::f32, out.shape), dprobs = dev.poisoned(DType::f32, probs.shape);
    const TensorView dmask = drop ? dev.poisoned(DType::u8, mask.shape) : TensorView();
    attention_probs_fwd(out.view(), probs.view(), drop ? mask.view() : TensorView(), in.q.view(), in.k.view(),
                        in.v.view(), in.host_opts);
    attention_probs_fwd(dout_, dprobs, dmask, in.dq_, in.dk_, in.dv_, in.dev_opts);
    dev.expect_matches(dout_, out, kFwdAtol, kFwdRtol, "out");
    dev.expect_matches(dprobs, probs, kFwdAtol, kFwdRtol, "probs");
    if (drop) dev.expect_matches(dmask, mask, 0, 0, "dropout mask (the CPU's Philox draws)");

    HostTensor gq = randn(in.q.shape, seed + 5), gk = randn(in.k.shape, seed + 6), gv = randn(in.v.shape, seed + 7);
    const TensorView dgq = dev.upload(gq), dgk = dev.upload(gk), dgv = dev.upload(gv);
    HostTensor ws = zeros({static_cast<int64_t>(attention_workspace_floats(h.b, h.n, h.s, h.d, 1))});
    const TensorView dws = dev.poisoned(
        DType::f32, {static_cast<int64_t>(attention_workspace_floats(h.b, h.n, h.s, h.d, 1, device_under_test()))});
    // The device backward reads the CPU's probs and mask, so it is compared alone.
    const TensorView dprobs_cpu = dev.upload(probs), dmask_cpu = drop ? dev.upload(mask) : TensorView();
    attention_probs_bwd(gq.view(), gk.view(), gv.view(), in.dout.view(), probs.view(),
                        drop ? mask.view() : TensorView(), in.q.view(), in.k.view(), in.v.view(), in.host_opts,
                        ws.view());
    attention_probs_bwd(dgq, dgk, dgv, in.ddout, dprobs_cpu, dmask_cpu, in.dq_, in.dk_, in.dv_, in.dev_opts, dws);
    dev.expect_matches(dgq, gq, kBwdAtol, kBwdRtol, "dq");
    dev.expect_matches(dgk, gk, kBwdAtol, kBwdRtol, "dk");
    dev.expect_matches(dgv, gv, kBwdAtol, kBwdRtol, "dv");
  }
}

TEST(DeviceAttention, RejectsBadKeyStart) {
  const Heads h{1, 2, 1, 6, 8};
  DeviceCase dev;
  AttnInputs in(dev, attn_case(h), 7);
  HostTensor ks = doc_key_starts(h.b, h.s, {0});
  ks.i32()[3] = 4;  // after the query itself
  in.dev_opts.key_start = dev.upload(ks);
  EXPECT_THROW(attention_fwd(dev.poisoned(DType::f32, {h.s, h.b, h.n * h.d}), dev.poisoned(DType::f32, {h.b, h.n, h.s}),
                             in.dq_, in.dk_, in.dv_, in.dev_opts),
               Error);
}

// attention_merge: rows where either side or both saw no key (lse −inf) included.
TEST(DeviceAttention, MergeByLogSumExp) {
  const int64_t b = 2, n = 3, s = 70, d = 5;
  DeviceCase dev;
  HostTensor out = randn({s, b, n * d}, 1), part = randn({s, b, n * d}, 2);
  HostTensor lse = randn({b, n, s}, 3, 2.0f), part_lse = randn({b, n, s}, 4, 2.0f);
  lse.f32()[1] = -INFINITY;
  part_lse.f32()[2] = -INFINITY;
  lse.f32()[3] = part_lse.f32()[3] = -INFINITY;
  const TensorView dout = dev.upload(out), dlse = dev.upload(lse);
  attention_merge(dout, dlse, dev.upload(part), dev.upload(part_lse));
  attention_merge(out.view(), lse.view(), part.view(), part_lse.view());
  dev.expect_matches(dout, out.view(), kFwdAtol, kFwdRtol, "out");
  dev.expect_matches(dlse, lse.view(), kFwdAtol, kFwdRtol, "lse");
}

// ---- KV cache ----------------------------------------------------------------------------------

// ops/attention.cpp's check_kv_cache reads slots and positions through host pointers, which is
// only possible for CPU (and, inside a GuardWindow, guard) tensors; so on CUDA these cases call
// the backend's entry points directly, after the same checks on the host copies.
void run_kv_write(DeviceCase& dev, const TensorView& kc, const TensorView& vc, const TensorView& k,
                  const TensorView& v, const TensorView& slots, const TensorView& positions) {
  if (dev.exact()) {
    const GuardWindow open;
    kv_cache_write(kc, vc, k, v, slots, positions);
    return;
  }
#if MT_HAVE_CUDA
  cuda::kv_cache_write(kc, vc, k, v, slots, positions);
#endif
}
void run_kv_attention(DeviceCase& dev, const TensorView& out, const TensorView& q, const TensorView& kc,
                      const TensorView& vc, const TensorView& slots, const TensorView& positions, float scale) {
  if (dev.exact()) {
    const GuardWindow open;
    kv_cache_attention_fwd(out, q, kc, vc, slots, positions, scale);
    return;
  }
#if MT_HAVE_CUDA
  cuda::kv_cache_attention_fwd(out, q, kc, vc, slots, positions, scale);
#endif
}

HostTensor ints(const std::vector<int32_t>& values) {
  HostTensor t(DType::i32, {static_cast<int64_t>(values.size())});
  std::memcpy(t.i32(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

TEST(DeviceAttention, KvCacheWriteAndDecode) {
  struct KvCase {
    int64_t n, g, d, slots, max_len;
    int64_t prefill;  // positions 0..prefill − 1 of every slot written first
    std::vector<int32_t> step_slots, step_positions;
  };
  const std::vector<KvCase> cases = {
      {4, 2, 16, 3, 40, 5, {0, 2, 1}, {5, 5, 5}},                       // one decode row per slot
      {8, 1, 64, 2, 300, 270, {1, 0, 1}, {270, 270, 271}},              // MQA, long rows past a block's keys
      {2, 2, 256, 1, 9, 0, {0, 0, 0, 0, 0, 0, 0}, {0, 1, 2, 3, 4, 5, 6}},  // prefill as one step, d = 256
      {3, 3, 7, 2, 5, 4, {1}, {4}},                                     // odd head dim, the last position
  };
  uint64_t seed = 900;
  for (const KvCase& c : cases) {
    SCOPED_TRACE("n" + std::to_string(c.n) + " g" + std::to_string(c.g) + " d" + std::to_string(c.d));
    DeviceCase dev;
    HostTensor kc = randn({c.slots, c.g, c.max_len, c.d}, ++seed), vc = randn(kc.shape, ++seed);
    const TensorView dkc = dev.upload(kc), dvc = dev.upload(vc);
    auto write = [&](HostTensor& slots, HostTensor& positions) {
      const int64_t tokens = slots.numel();
      HostTensor k = randn({1, c.g, tokens, c.d}, ++seed), v = randn({1, c.g, tokens, c.d}, ++seed);
      kv_cache_write(kc.view(), vc.view(), k.view(), v.view(), slots.view(), positions.view());
      run_kv_write(dev, dkc, dvc, dev.upload(k), dev.upload(v), dev.upload(slots), dev.upload(positions));
    };
    if (c.prefill > 0) {
      std::vector<int32_t> sl, ps;
      for (int64_t s = 0; s < c.slots; ++s)
        for (int64_t p = 0; p < c.prefill; ++p) {
          sl.push_back(static_cast<int32_t>(s));
          ps.push_back(static_cast<int32_t>(p));
        }
      HostTensor hs = ints(sl), hp = ints(ps);
      write(hs, hp);
    }
    HostTensor slots = ints(c.step_slots), positions = ints(c.step_positions);
    write(slots, positions);
    dev.expect_matches(dkc, kc, 0, 0, "k_cache");
    dev.expect_matches(dvc, vc, 0, 0, "v_cache");

    const int64_t tokens = slots.numel();
    HostTensor q = randn({1, c.n, tokens, c.d}, ++seed), out = zeros({tokens, c.n * c.d});
    const TensorView dout_ = dev.poisoned(DType::f32, out.shape);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    kv_cache_attention_fwd(out.view(), q.view(), kc.view(), vc.view(), slots.view(), positions.view(), scale);
    run_kv_attention(dev, dout_, dev.upload(q), dkc, dvc, dev.upload(slots), dev.upload(positions), scale);
    dev.expect_matches(dout_, out, kFwdAtol, kFwdRtol, "kv_cache_attention_fwd out");
  }
}

}  // namespace
}  // namespace mt::test
