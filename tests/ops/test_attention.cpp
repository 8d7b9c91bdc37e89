// Tests ops/attention.h: the QKV split + RoPE and both attention paths, forward and backward,
// against fp64 references written here from the formulas (split, rotation, causal softmax,
// counter-based dropout, weighted sum) and against central finite differences.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "testing.h"

namespace mt {
namespace {

using test::HostTensor;
using test::randn;
using test::zeros;

int threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// ---- fp64 references ------------------------------------------------------------------------

struct Dims {
  int64_t b, n, g, s, d;
  int64_t r() const { return n / g; }
};

// Split of qkv [s, b, g·(r + 2)·d] into q [b, n, s, d], k, v [b, g, s, d], with rotate(p, x, y)
// turning each query and key head row x at table row p into y (values copied).
struct RefQkv {
  std::vector<double> q, k, v;
};
// positions: [b, s] table rows (empty: row = sequence index i).
template <typename Rotate>
RefQkv ref_split(const Dims& m, const std::vector<double>& qkv, const std::vector<int32_t>& positions,
                 const Rotate& rotate) {
  RefQkv o{std::vector<double>(m.b * m.n * m.s * m.d), std::vector<double>(m.b * m.g * m.s * m.d),
           std::vector<double>(m.b * m.g * m.s * m.d)};
  const int64_t width = (m.n + 2 * m.g) * m.d;
  for (int64_t i = 0; i < m.s; ++i)
    for (int64_t j = 0; j < m.b; ++j)
      for (int64_t gi = 0; gi < m.g; ++gi) {
        const int64_t p = positions.empty() ? i : positions[j * m.s + i];
        const double* grp = qkv.data() + (i * m.b + j) * width + gi * (m.r() + 2) * m.d;
        for (int64_t hh = 0; hh < m.r(); ++hh)
          rotate(p, grp + hh * m.d, o.q.data() + ((j * m.n + gi * m.r() + hh) * m.s + i) * m.d);
        rotate(p, grp + m.r() * m.d, o.k.data() + ((j * m.g + gi) * m.s + i) * m.d);
        const double* vs = grp + (m.r() + 1) * m.d;
        std::copy(vs, vs + m.d, o.v.data() + ((j * m.g + gi) * m.s + i) * m.d);
      }
  return o;
}

// The whole-head rotation from the tables: x'[c] = x[c]·cos − x[c + d/2]·sin,
// x'[c + d/2] = x[c + d/2]·cos + x[c]·sin.
RefQkv ref_split_rope(const Dims& m, const std::vector<double>& qkv, const std::vector<double>& cos,
                      const std::vector<double>& sin, const std::vector<int32_t>& positions = {}) {
  const int64_t half = m.d / 2;
  return ref_split(m, qkv, positions, [&](int64_t i, const double* x, double* y) {
    for (int64_t c = 0; c < m.d; ++c) y[c] = x[c];
    if (cos.empty()) return;
    for (int64_t c = 0; c < half; ++c) {
      const double cs = cos[i * half + c], sn = sin[i * half + c];
      y[c] = x[c] * cs - x[c + half] * sn;
      y[c + half] = x[c + half] * cs + x[c] * sn;
    }
  });
}

// Megatron's RoPE of one head row of width d at position p, in fp64 from its definition
// (RotaryEmbedding and rope_utils._apply_rotary_pos_emb_bshd): inv_freq = 1 / base^(arange(0, r, 2) / r)
// for rotary dim r; the angles p·inv_freq laid out as cat(f, f) or, interleaved, each one twice
// in a row (stack((f, f), -1)); t = x[:rot] with rot that layout's width; t·cos + _rotate_half(t)·sin,
// _rotate_half being cat(−t2, t1) of t's two halves or, interleaved, (−t[2i+1], t[2i]) at (2i, 2i+1);
// then x[rot:] unchanged.
void megatron_rope_row(const double* x, double* y, int64_t d, int64_t p, int64_t r, double base, bool interleaved) {
  std::vector<double> inv_freq;
  for (int64_t e = 0; e < r; e += 2) inv_freq.push_back(1.0 / std::pow(base, static_cast<double>(e) / r));
  const int64_t f = static_cast<int64_t>(inv_freq.size()), rot = 2 * f;
  ASSERT_LE(rot, d);
  std::vector<double> emb(rot), rotated(rot);
  for (int64_t i = 0; i < f; ++i) {
    const double angle = static_cast<double>(p) * inv_freq[i];
    if (interleaved) {
      emb[2 * i] = emb[2 * i + 1] = angle;
      rotated[2 * i] = -x[2 * i + 1];
      rotated[2 * i + 1] = x[2 * i];
    } else {
      emb[i] = emb[i + f] = angle;
      rotated[i] = -x[i + f];
      rotated[i + f] = x[i];
    }
  }
  for (int64_t c = 0; c < d; ++c) y[c] = c < rot ? x[c] * std::cos(emb[c]) + rotated[c] * std::sin(emb[c]) : x[c];
}

RefQkv ref_split_megatron(const Dims& m, const std::vector<double>& qkv, int64_t r, double base, bool interleaved,
                          const std::vector<int32_t>& positions = {}) {
  return ref_split(m, qkv, positions, [&](int64_t p, const double* x, double* y) {
    megatron_rope_row(x, y, m.d, p, r, base, interleaved);
  });
}

struct RefAttention {
  std::vector<double> out, lse, probs;  // out [s, b, n·d], lse [b, n, s], probs [b, n, s, s]
  std::vector<uint8_t> keep;            // [b, n, s, s], 0 above the diagonal and before key_start
  std::vector<double> dq, dk, dv;
};

RefAttention ref_attention(const Dims& m, const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v, const AttentionOptions& o,
                           const std::vector<double>& dout) {
  RefAttention a;
  const int64_t s = m.s, d = m.d, total = o.total_heads ? o.total_heads : m.n;
  a.out.assign(s * m.b * m.n * d, 0.0);
  a.lse.assign(m.b * m.n * s, 0.0);
  a.probs.assign(m.b * m.n * s * s, 0.0);
  a.keep.assign(m.b * m.n * s * s, 0);
  a.dq.assign(q.size(), 0.0);
  a.dk.assign(k.size(), 0.0);
  a.dv.assign(v.size(), 0.0);
  const double inv_keep = 1.0 / (1.0 - static_cast<double>(o.dropout_p));
  const int32_t* key_start = o.key_start.empty() ? nullptr : o.key_start.i32();
  for (int64_t j = 0; j < m.b; ++j)
    for (int64_t h = 0; h < m.n; ++h) {
      const int64_t gi = h / m.r();
      const double* qh = q.data() + (j * m.n + h) * s * d;
      const double* kh = k.data() + (j * m.g + gi) * s * d;
      const double* vh = v.data() + (j * m.g + gi) * s * d;
      double* dqh = a.dq.data() + (j * m.n + h) * s * d;
      double* dkh = a.dk.data() + (j * m.g + gi) * s * d;
      double* dvh = a.dv.data() + (j * m.g + gi) * s * d;
      for (int64_t i = 0; i < s; ++i) {
        // Keys lo..i: the query's document up to itself (lo = 0: plain causal).
        const int64_t lo = key_start ? key_start[j * s + i] : 0;
        std::vector<double> score(i + 1), mult(i + 1), dp(i + 1);
        double mx = -INFINITY;
        for (int64_t t = lo; t <= i; ++t) {
          double dot = 0.0;
          for (int64_t c = 0; c < d; ++c) dot += qh[i * d + c] * kh[t * d + c];
          score[t] = o.scale * dot;
          mx = std::max(mx, score[t]);
        }
        double sum = 0.0;
        for (int64_t t = lo; t <= i; ++t) sum += std::exp(score[t] - mx);
        const double lse = mx + std::log(sum);
        a.lse[(j * m.n + h) * s + i] = lse;
        const size_t row = ((j * m.n + h) * s + i) * s;
        const uint64_t rng_row =
            static_cast<uint64_t>((((static_cast<int64_t>(o.first_sample) + j) * total + o.head_offset + h) * s + i) * s);
        const double* go = dout.data() + (i * m.b + j) * m.n * d + h * d;
        double* op = a.out.data() + (i * m.b + j) * m.n * d + h * d;
        double dsum = 0.0;
        for (int64_t t = lo; t <= i; ++t) {
          const double p = std::exp(score[t] - lse);
          a.probs[row + t] = p;
          const bool keep = o.dropout_p == 0.0f || o.rng.uniform(rng_row + t) >= o.dropout_p;
          a.keep[row + t] = keep;
          mult[t] = o.dropout_p > 0.0f ? (keep ? inv_keep : 0.0) : 1.0;
          double dpd = 0.0;
          for (int64_t c = 0; c < d; ++c) {
            op[c] += p * mult[t] * vh[t * d + c];
            dpd += go[c] * vh[t * d + c];
          }
          dp[t] = dpd * mult[t];
          dsum += p * dp[t];
        }
        for (int64_t t = lo; t <= i; ++t) {
          const double p = a.probs[row + t];
          const double ds = p * (dp[t] - dsum);
          for (int64_t c = 0; c < d; ++c) {
            dqh[i * d + c] += o.scale * ds * kh[t * d + c];
            dkh[t * d + c] += o.scale * ds * qh[i * d + c];
            dvh[t * d + c] += p * mult[t] * go[c];
          }
        }
      }
    }
  return a;
}

// Bitwise equality for pure data movement.
void expect_exact(const float* actual, const std::vector<double>& expected, const char* what) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < expected.size(); ++i)
    if (static_cast<double>(actual[i]) != expected[i] && bad++ == 0) first = static_cast<int64_t>(i);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ, first at " << first;
}

std::vector<double> add(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> c(a);
  for (size_t i = 0; i < c.size(); ++i) c[i] += b[i];
  return c;
}

// ---- RoPE tables and the QKV split ---------------------------------------------------------

// cos/sin[p, i] of angle p / base^(2i / r) against fp64, r the rotated width (0: the whole 2·half).
void expect_rope_tables(int64_t positions, int64_t half, double base, int64_t r) {
  HostTensor cos = zeros({positions, half}), sin = zeros({positions, half});
  rope_tables(cos.view(), sin.view(), base, r);
  const double width = static_cast<double>(r ? r : 2 * half);
  std::vector<double> ec, es;
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p / std::pow(base, static_cast<double>(2 * i) / width);
      ec.push_back(std::cos(angle));
      es.push_back(std::sin(angle));
    }
  test::expect_close(cos.f32(), ec, 1e-6, 0.0, "cos");
  test::expect_close(sin.f32(), es, 1e-6, 0.0, "sin");
}

TEST(Rope, TablesMatchFormula) {
  for (double base : {10000.0, 500000.0}) expect_rope_tables(37, 5, base, 0);
}

struct SplitFixture {
  Dims m;
  HostTensor qkv, q, k, v, cos, sin;
  SplitFixture(Dims dims, bool rope, int64_t positions)
      : m(dims), qkv(randn({dims.s, dims.b, (dims.n + 2 * dims.g) * dims.d}, 11)), q(zeros({dims.b, dims.n, dims.s, dims.d})),
        k(zeros({dims.b, dims.g, dims.s, dims.d})), v(zeros({dims.b, dims.g, dims.s, dims.d})) {
    if (rope) {
      cos = zeros({positions, dims.d / 2});
      sin = zeros({positions, dims.d / 2});
      rope_tables(cos.view(), sin.view(), 10000.0);
    }
  }
  TensorView cv() { return cos.bytes.empty() ? TensorView() : cos.view(); }
  TensorView sv() { return sin.bytes.empty() ? TensorView() : sin.view(); }
  std::vector<double> dcos() { return cos.bytes.empty() ? std::vector<double>() : test::to_double(cos); }
  std::vector<double> dsin() { return sin.bytes.empty() ? std::vector<double>() : test::to_double(sin); }
};

TEST(Rope, QkvSplitIsPermutationWithoutRope) {
  for (Dims m : {Dims{2, 3, 3, 5, 4}, Dims{2, 6, 2, 5, 6}, Dims{1, 4, 1, 7, 3}}) {
    SplitFixture f(m, false, 0);
    qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), {}, {});
    const RefQkv ref = ref_split_rope(m, test::to_double(f.qkv), {}, {});
    expect_exact(f.q.f32(), ref.q, "q");
    expect_exact(f.k.f32(), ref.k, "k");
    expect_exact(f.v.f32(), ref.v, "v");
    // Backward of a permutation is the inverse permutation, accumulated onto dqkv.
    HostTensor dqkv = randn(f.qkv.shape, 12);
    const std::vector<double> before = test::to_double(dqkv);
    qkv_split_rope_bwd(dqkv.view(), f.q.view(), f.k.view(), f.v.view(), {}, {});
    std::vector<double> expect = add(before, test::to_double(f.qkv));
    test::expect_close(dqkv.f32(), expect, 1e-6, 1e-6, "dqkv round trip");
  }
}

TEST(Rope, QkvSplitRopeMatchesReference) {
  for (Dims m : {Dims{2, 3, 3, 13, 10}, Dims{2, 6, 2, 9, 8}, Dims{1, 4, 1, 11, 2}}) {
    SplitFixture f(m, true, m.s + 3);
    qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv());
    const RefQkv ref = ref_split_rope(m, test::to_double(f.qkv), f.dcos(), f.dsin());
    test::expect_close(f.q.f32(), ref.q, 1e-6, 1e-6, "q");
    test::expect_close(f.k.f32(), ref.k, 1e-6, 1e-6, "k");
    expect_exact(f.v.f32(), ref.v, "v");
    // The rotation is orthogonal: backward of the forward output gives back qkv (onto dqkv's prior).
    HostTensor dqkv = randn(f.qkv.shape, 13);
    const std::vector<double> before = test::to_double(dqkv);
    qkv_split_rope_bwd(dqkv.view(), f.q.view(), f.k.view(), f.v.view(), f.cv(), f.sv());
    test::expect_close(dqkv.f32(), add(before, test::to_double(f.qkv)), 1e-5, 1e-5, "dqkv round trip");
  }
}

TEST(Rope, QkvSplitRopeBackwardMatchesFiniteDifferences) {
  const Dims m{2, 6, 2, 6, 4};
  SplitFixture f(m, true, m.s);
  HostTensor wq = randn(f.q.shape, 21), wk = randn(f.k.shape, 22), wv = randn(f.v.shape, 23);
  auto loss = [&] {
    qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv());
    return test::weighted_sum(f.q.f32(), wq.f32(), f.q.numel()) + test::weighted_sum(f.k.f32(), wk.f32(), f.k.numel()) +
           test::weighted_sum(f.v.f32(), wv.f32(), f.v.numel());
  };
  const std::vector<double> fd = test::finite_difference(f.qkv, loss, 1e-2);
  HostTensor dqkv = zeros(f.qkv.shape);
  qkv_split_rope_bwd(dqkv.view(), wq.view(), wk.view(), wv.view(), f.cv(), f.sv());
  // The map is linear, so central differences are exact up to f32 rounding of the loss.
  test::expect_close(dqkv.f32(), fd, 1e-3, 1e-3, "dqkv vs finite differences");
}

// --reset-position-ids: per-token positions [b, s], restarting inside a row (documents of a
// packed sample), and rows whose positions are not the sequence index at all.
HostTensor reset_positions(const Dims& m, const std::vector<std::vector<int64_t>>& doc_starts) {
  HostTensor pos(DType::i32, {m.b, m.s});
  for (int64_t j = 0; j < m.b; ++j) {
    int64_t start = 0;
    for (int64_t i = 0; i < m.s; ++i) {
      for (int64_t d : doc_starts[j % doc_starts.size()])
        if (d == i) start = i;
      pos.i32()[j * m.s + i] = static_cast<int32_t>(i - start);
    }
  }
  return pos;
}

std::vector<int32_t> to_i32(HostTensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

TEST(Rope, PositionsMatchReference) {
  for (Dims m : {Dims{2, 3, 3, 13, 10}, Dims{3, 6, 2, 9, 8}, Dims{1, 4, 1, 11, 2}}) {
    SplitFixture f(m, true, m.s);
    HostTensor pos = reset_positions(m, {{4, 5, 10}, {1}, {}});
    qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), pos.view());
    const RefQkv ref = ref_split_rope(m, test::to_double(f.qkv), f.dcos(), f.dsin(), to_i32(pos));
    test::expect_close(f.q.f32(), ref.q, 1e-6, 1e-6, "q");
    test::expect_close(f.k.f32(), ref.k, 1e-6, 1e-6, "k");
    expect_exact(f.v.f32(), ref.v, "v");
    // The restarted rows differ from the unreset rotation (the test sees the positions at all).
    const RefQkv plain = ref_split_rope(m, test::to_double(f.qkv), f.dcos(), f.dsin());
    double diff = 0.0;
    for (size_t i = 0; i < plain.q.size(); ++i) diff = std::max(diff, std::fabs(plain.q[i] - ref.q[i]));
    EXPECT_GT(diff, 1e-2);
    // Backward: the inverse rotation by the same positions gives back qkv.
    HostTensor dqkv = randn(f.qkv.shape, 13);
    const std::vector<double> before = test::to_double(dqkv);
    qkv_split_rope_bwd(dqkv.view(), f.q.view(), f.k.view(), f.v.view(), f.cv(), f.sv(), pos.view());
    test::expect_close(dqkv.f32(), add(before, test::to_double(f.qkv)), 1e-5, 1e-5, "dqkv round trip");
  }
}

TEST(Rope, PositionsEqualToSequenceIndexAreBitIdentical) {
  const Dims m{2, 6, 2, 9, 8};
  SplitFixture f(m, true, m.s + 2), g(m, true, m.s + 2);
  HostTensor pos = reset_positions(m, {{}});
  qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv());
  qkv_split_rope_fwd(g.q.view(), g.k.view(), g.v.view(), g.qkv.view(), g.cv(), g.sv(), pos.view());
  EXPECT_EQ(f.q.bytes, g.q.bytes);
  EXPECT_EQ(f.k.bytes, g.k.bytes);
  HostTensor d1 = zeros(f.qkv.shape), d2 = zeros(f.qkv.shape);
  qkv_split_rope_bwd(d1.view(), f.q.view(), f.k.view(), f.v.view(), f.cv(), f.sv());
  qkv_split_rope_bwd(d2.view(), f.q.view(), f.k.view(), f.v.view(), f.cv(), f.sv(), pos.view());
  EXPECT_EQ(d1.bytes, d2.bytes);
}

TEST(Rope, PositionsBackwardMatchesFiniteDifferences) {
  const Dims m{2, 6, 2, 7, 4};
  SplitFixture f(m, true, m.s);
  HostTensor pos = reset_positions(m, {{3}, {1, 2, 6}});
  HostTensor wq = randn(f.q.shape, 21), wk = randn(f.k.shape, 22), wv = randn(f.v.shape, 23);
  auto loss = [&] {
    qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), pos.view());
    return test::weighted_sum(f.q.f32(), wq.f32(), f.q.numel()) + test::weighted_sum(f.k.f32(), wk.f32(), f.k.numel()) +
           test::weighted_sum(f.v.f32(), wv.f32(), f.v.numel());
  };
  const std::vector<double> fd = test::finite_difference(f.qkv, loss, 1e-2);
  HostTensor dqkv = zeros(f.qkv.shape);
  qkv_split_rope_bwd(dqkv.view(), wq.view(), wk.view(), wv.view(), f.cv(), f.sv(), pos.view());
  test::expect_close(dqkv.f32(), fd, 1e-3, 1e-3, "dqkv vs finite differences");
}

TEST(Rope, RejectsBadPositions) {
  const Dims m{2, 4, 2, 5, 6};
  SplitFixture f(m, true, m.s);
  HostTensor pos = reset_positions(m, {{2}});
  EXPECT_NO_THROW(qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), pos.view()));
  pos.i32()[7] = static_cast<int32_t>(m.s);  // past the tables' rows
  EXPECT_THROW(qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), pos.view()),
               Error);
  EXPECT_THROW(qkv_split_rope_bwd(f.qkv.view(), f.q.view(), f.k.view(), f.v.view(), f.cv(), f.sv(), pos.view()),
               Error);
  pos.i32()[7] = -1;
  EXPECT_THROW(qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), pos.view()),
               Error);
  HostTensor transposed(DType::i32, {m.s, m.b}), wrong_dtype = zeros({m.b, m.s});
  EXPECT_THROW(
      qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), transposed.view()), Error);
  EXPECT_THROW(
      qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), wrong_dtype.view()), Error);
}

TEST(Rope, RejectsBadShapes) {
  const Dims m{1, 4, 2, 5, 6};
  SplitFixture f(m, true, m.s);
  HostTensor short_cos = zeros({m.s - 1, m.d / 2}), short_sin = zeros({m.s - 1, m.d / 2});
  EXPECT_THROW(qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), short_cos.view(), short_sin.view()),
               Error);
  EXPECT_THROW(qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), {}), Error);
  HostTensor wide_qkv = zeros({m.s, m.b, (m.n + 2 * m.g) * m.d + 1});
  EXPECT_THROW(qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), wide_qkv.view(), f.cv(), f.sv()), Error);
  HostTensor k3 = zeros({m.b, 3, m.s, m.d}), v3 = zeros({m.b, 3, m.s, m.d});  // 4 heads, 3 groups
  EXPECT_THROW(qkv_split_rope_bwd(f.qkv.view(), f.q.view(), k3.view(), v3.view(), {}, {}), Error);
  // Odd head dim: 2 rotated pairs fit (the fifth element passes through), 3 do not.
  HostTensor q5 = zeros({1, 2, 4, 5}), k5 = zeros({1, 2, 4, 5}), v5 = zeros({1, 2, 4, 5}),
             qkv5 = zeros({4, 1, 6 * 5}), c5 = zeros({4, 2}), s5 = zeros({4, 2});
  EXPECT_NO_THROW(qkv_split_rope_fwd(q5.view(), k5.view(), v5.view(), qkv5.view(), c5.view(), s5.view()));
  HostTensor c3 = zeros({4, 3}), s3 = zeros({4, 3}), s2 = zeros({4, 2});
  EXPECT_THROW(qkv_split_rope_fwd(q5.view(), k5.view(), v5.view(), qkv5.view(), c3.view(), s3.view()), Error);
  EXPECT_THROW(qkv_split_rope_bwd(qkv5.view(), q5.view(), k5.view(), v5.view(), c3.view(), s3.view()), Error);
  EXPECT_THROW(qkv_split_rope_fwd(q5.view(), k5.view(), v5.view(), qkv5.view(), c5.view(), s5.view(), {},
                                  static_cast<RopeForm>(7)),
               Error);
  EXPECT_THROW(rope_tables(c3.view(), s2.view(), 10000.0), Error);
  EXPECT_THROW(rope_tables(c5.view(), s5.view(), -1.0), Error);
  // The rotary dim must need exactly the tables' columns: ceil(r / 2) = 2 for r = 3 or 4.
  EXPECT_NO_THROW(rope_tables(c5.view(), s5.view(), 10000.0, 3));
  EXPECT_NO_THROW(rope_tables(c5.view(), s5.view(), 10000.0, 4));
  EXPECT_THROW(rope_tables(c5.view(), s5.view(), 10000.0, 5), Error);
  EXPECT_THROW(rope_tables(c5.view(), s5.view(), 10000.0, -2), Error);
}

// ---- --rotary-percent and --rotary-interleaved ---------------------------------------------

// Tables for Megatron's rotary dim r (int(d · rotary_percent)): ceil(r/2) columns with
// inv_freq[i] = base^(−2i/r), odd r included (arange(0, r, 2) / r).
TEST(Rope, TablesForARotaryDimMatchMegatronsInvFreq) {
  for (const int64_t r : {4, 5, 3, 1, 10}) {
    SCOPED_TRACE("rotary dim " + std::to_string(r));
    expect_rope_tables(29, (r + 1) / 2, 10000.0, r);
  }
}

struct PartialCase {
  Dims m;
  int64_t r;  // Megatron's rotary dim
  bool interleaved, positions;
};

std::string name_of(const PartialCase& c) {
  return "d " + std::to_string(c.m.d) + " rotary dim " + std::to_string(c.r) + (c.interleaved ? " interleaved" : "") +
         (c.positions ? " positions" : "");
}

const std::vector<PartialCase> kPartialCases = {
    {{2, 4, 2, 9, 8}, 4, false, false},   // --rotary-percent 0.5
    {{2, 4, 2, 9, 8}, 4, true, false},    // 0.5, interleaved
    {{2, 3, 3, 7, 10}, 5, false, true},   // 0.5 of 10: odd rotary dim, 3 pairs, 4 passed through
    {{2, 3, 3, 7, 10}, 5, true, false},
    {{1, 4, 1, 6, 12}, 3, true, true},    // 0.25 of 12
    {{2, 6, 2, 5, 8}, 8, true, false},    // whole head, interleaved
    {{2, 6, 2, 5, 8}, 8, false, true},    // whole head, rotate-half: the default
};

struct PartialFixture : SplitFixture {
  HostTensor pos;
  PartialFixture(const PartialCase& c) : SplitFixture(c.m, false, 0) {
    const int64_t rows = c.m.s + 3;
    cos = zeros({rows, (c.r + 1) / 2});
    sin = zeros({rows, (c.r + 1) / 2});
    rope_tables(cos.view(), sin.view(), 10000.0, c.r);
    if (c.positions) pos = reset_positions(c.m, {{3, 4}, {1}});
  }
  TensorView pv() { return pos.bytes.empty() ? TensorView() : pos.view(); }
  std::vector<int32_t> ipos() { return pos.bytes.empty() ? std::vector<int32_t>() : to_i32(pos); }
};

RopeForm form_of(const PartialCase& c) { return c.interleaved ? RopeForm::interleaved : RopeForm::rotate_half; }

TEST(Rope, PartialAndInterleavedMatchMegatronsDefinition) {
  for (const PartialCase& c : kPartialCases) {
    SCOPED_TRACE(name_of(c));
    PartialFixture f(c);
    qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), f.pv(), form_of(c));
    const RefQkv ref = ref_split_megatron(c.m, test::to_double(f.qkv), c.r, 10000.0, c.interleaved, f.ipos());
    test::expect_close(f.q.f32(), ref.q, 1e-5, 1e-5, "q");
    test::expect_close(f.k.f32(), ref.k, 1e-5, 1e-5, "k");
    expect_exact(f.v.f32(), ref.v, "v");
    // The elements past the rotated pairs are copied bit for bit.
    const int64_t rot = 2 * ((c.r + 1) / 2);
    int64_t passed = 0, bad = 0;
    for (int64_t row = 0; row < f.q.numel() / c.m.d; ++row)
      for (int64_t e = rot; e < c.m.d; ++e, ++passed)
        bad += static_cast<double>(f.q.f32()[row * c.m.d + e]) != ref.q[row * c.m.d + e];
    EXPECT_EQ(bad, 0) << "of " << passed << " unrotated query elements";
    // The other form gives another result: the test tells the two apart.
    PartialFixture g(c);
    const RopeForm other = c.interleaved ? RopeForm::rotate_half : RopeForm::interleaved;
    qkv_split_rope_fwd(g.q.view(), g.k.view(), g.v.view(), g.qkv.view(), g.cv(), g.sv(), g.pv(), other);
    double diff = 0.0;
    for (int64_t i = 0; i < f.q.numel(); ++i) diff = std::max(diff, std::fabs(double(f.q.f32()[i]) - g.q.f32()[i]));
    EXPECT_GT(diff, 1e-2);
    // The rotation is orthogonal: backward of the forward output gives back qkv (onto dqkv's prior).
    HostTensor dqkv = randn(f.qkv.shape, 13);
    const std::vector<double> before = test::to_double(dqkv);
    qkv_split_rope_bwd(dqkv.view(), f.q.view(), f.k.view(), f.v.view(), f.cv(), f.sv(), f.pv(), form_of(c));
    test::expect_close(dqkv.f32(), add(before, test::to_double(f.qkv)), 1e-5, 1e-5, "dqkv round trip");
  }
}

TEST(Rope, PartialAndInterleavedBackwardMatchesFiniteDifferences) {
  for (const PartialCase& c : {PartialCase{{2, 4, 2, 6, 10}, 5, false, true}, PartialCase{{2, 4, 2, 6, 10}, 5, true, true},
                               PartialCase{{1, 2, 1, 5, 8}, 4, true, false}}) {
    SCOPED_TRACE(name_of(c));
    PartialFixture f(c);
    HostTensor wq = randn(f.q.shape, 21), wk = randn(f.k.shape, 22), wv = randn(f.v.shape, 23);
    auto loss = [&] {
      qkv_split_rope_fwd(f.q.view(), f.k.view(), f.v.view(), f.qkv.view(), f.cv(), f.sv(), f.pv(), form_of(c));
      return test::weighted_sum(f.q.f32(), wq.f32(), f.q.numel()) +
             test::weighted_sum(f.k.f32(), wk.f32(), f.k.numel()) + test::weighted_sum(f.v.f32(), wv.f32(), f.v.numel());
    };
    const std::vector<double> fd = test::finite_difference(f.qkv, loss, 1e-2);
    HostTensor dqkv = zeros(f.qkv.shape);
    qkv_split_rope_bwd(dqkv.view(), wq.view(), wk.view(), wv.view(), f.cv(), f.sv(), f.pv(), form_of(c));
    test::expect_close(dqkv.f32(), fd, 1e-3, 1e-3, "dqkv vs finite differences");
  }
}

// ---- attention ------------------------------------------------------------------------------

struct Case {
  std::string name;
  Dims m;
  float dropout_p;
  float scale_mul = 1.0f;  // scale = scale_mul / √d
  int64_t head_offset = 0, total_heads = 0;
  int64_t fd_stride = 3;   // finite-difference every fd_stride-th element (coprime with s and d)
  // --reset-attention-mask: the document starts of each row (row j uses docs[j % size]); empty:
  // plain causal. A start at i makes query i attend to keys [i, next start) only.
  std::vector<std::vector<int64_t>> docs = {};
};

// key_start [b, s] from document starts: the last start <= i.
HostTensor key_starts(int64_t b, int64_t s, const std::vector<std::vector<int64_t>>& docs) {
  HostTensor ks(DType::i32, {b, s});
  for (int64_t j = 0; j < b; ++j) {
    int64_t start = 0;
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t d : docs[j % docs.size()])
        if (d == i) start = i;
      ks.i32()[j * s + i] = static_cast<int32_t>(start);
    }
  }
  return ks;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Fixture {
  Dims m;
  AttentionOptions opt;
  HostTensor q, k, v, w, out, lse, probs, mask, ws, key_start;
  Fixture(const Case& c)
      : m(c.m), q(randn({c.m.b, c.m.n, c.m.s, c.m.d}, 1)), k(randn({c.m.b, c.m.g, c.m.s, c.m.d}, 2)),
        v(randn({c.m.b, c.m.g, c.m.s, c.m.d}, 3)), w(randn({c.m.s, c.m.b, c.m.n * c.m.d}, 4)),
        out(zeros({c.m.s, c.m.b, c.m.n * c.m.d})), lse(zeros({c.m.b, c.m.n, c.m.s})),
        probs(zeros({c.m.b, c.m.n, c.m.s, c.m.s})),
        ws(zeros({static_cast<int64_t>(attention_workspace_floats(c.m.b, c.m.n, c.m.s, c.m.d, threads()))})) {
    opt.scale = c.scale_mul / std::sqrt(static_cast<float>(c.m.d));
    opt.dropout_p = c.dropout_p;
    opt.rng = RngStream{1234, 99};
    opt.head_offset = c.head_offset;
    opt.total_heads = c.total_heads;
    opt.first_sample = 5;  // the masks' sample index (the formula's first_sample + j)
    if (c.dropout_p > 0.0f) mask = HostTensor(DType::u8, {c.m.b, c.m.n, c.m.s, c.m.s});
    if (!c.docs.empty()) {
      key_start = key_starts(c.m.b, c.m.s, c.docs);
      opt.key_start = key_start.view();
    }
  }
  TensorView mv() { return mask.bytes.empty() ? TensorView() : mask.view(); }
  RefAttention reference() {
    return ref_attention(m, test::to_double(q), test::to_double(k), test::to_double(v), opt, test::to_double(w));
  }
  double lean_loss() {
    attention_fwd(out.view(), lse.view(), q.view(), k.view(), v.view(), opt);
    return test::weighted_sum(out.f32(), w.f32(), out.numel());
  }
  double probs_loss() {
    attention_probs_fwd(out.view(), probs.view(), mv(), q.view(), k.view(), v.view(), opt);
    return test::weighted_sum(out.f32(), w.f32(), out.numel());
  }
};

// Gradient buffers pre-filled with random values: the backward must add onto them.
struct Grads {
  HostTensor dq, dk, dv;
  std::vector<double> dq0, dk0, dv0;
  explicit Grads(const Fixture& f)
      : dq(randn(f.q.shape, 5)), dk(randn(f.k.shape, 6)), dv(randn(f.v.shape, 7)), dq0(test::to_double(dq)),
        dk0(test::to_double(dk)), dv0(test::to_double(dv)) {}
  void expect_match(const RefAttention& ref, double atol, double rtol, const std::string& what) {
    test::expect_close(dq.f32(), add(dq0, ref.dq), atol, rtol, (what + " dq").c_str());
    test::expect_close(dk.f32(), add(dk0, ref.dk), atol, rtol, (what + " dk").c_str());
    test::expect_close(dv.f32(), add(dv0, ref.dv), atol, rtol, (what + " dv").c_str());
  }
  // The increments alone, for comparing against finite differences.
  std::vector<float> delta(HostTensor& t, const std::vector<double>& t0) {
    std::vector<float> d(t0.size());
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<float>(t.f32()[i] - t0[i]);
    return d;
  }
};

std::vector<int64_t> strided(int64_t n, int64_t stride) {
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; i += stride) idx.push_back(i);
  return idx;
}

// Finite differences of Σ out·w w.r.t. q, k, v against the backward's increments, on `only`.
void expect_fd(Fixture& f, Grads& g, const std::function<double()>& loss, int64_t stride, const std::string& what) {
  // f32 loss rounding / (2h) is ~1e-5 and the O(h²) truncation ~1e-4 here; a wrong sign or a
  // missing term is O(0.1).  Elements not probed are compared as 0 vs 0.
  const double atol = 2e-3, rtol = 2e-2, h = 1e-2;
  struct Item {
    HostTensor* x;
    HostTensor* grad;
    std::vector<double>* prior;
    const char* name;
  };
  for (Item it : {Item{&f.q, &g.dq, &g.dq0, "dq"}, Item{&f.k, &g.dk, &g.dk0, "dk"}, Item{&f.v, &g.dv, &g.dv0, "dv"}}) {
    const std::vector<int64_t> only = strided(it.x->numel(), stride);
    const std::vector<double> fd = test::finite_difference(*it.x, loss, h, only);
    std::vector<float> got = g.delta(*it.grad, *it.prior);
    std::vector<float> probed(got.size(), 0.0f);
    for (int64_t i : only) probed[i] = got[i];
    test::expect_close(probed.data(), fd, atol, rtol, (what + " " + it.name + " vs finite differences").c_str());
  }
}

class AttentionCase : public ::testing::TestWithParam<Case> {};

// f32 kernels vs the fp64 reference: forward values ~1, sums over <= 70 keys.
constexpr double kFwdAtol = 2e-5, kFwdRtol = 1e-4;
constexpr double kBwdAtol = 5e-5, kBwdRtol = 2e-4;

TEST_P(AttentionCase, LeanForwardMatchesReference) {
  Fixture f(GetParam());
  f.lean_loss();
  const RefAttention ref = f.reference();
  test::expect_close(f.out.f32(), ref.out, kFwdAtol, kFwdRtol, "out");
  test::expect_close(f.lse.f32(), ref.lse, kFwdAtol, kFwdRtol, "lse");
}

TEST_P(AttentionCase, ProbsForwardMatchesReference) {
  Fixture f(GetParam());
  f.probs_loss();
  const RefAttention ref = f.reference();
  test::expect_close(f.out.f32(), ref.out, kFwdAtol, kFwdRtol, "out");
  test::expect_close(f.probs.f32(), ref.probs, 1e-6, 1e-5, "probs");
  if (f.opt.dropout_p > 0.0f) {
    int64_t mismatches = 0, kept = 0, live = 0;
    for (int64_t i = 0; i < f.mask.numel(); ++i) {
      mismatches += f.mask.u8()[i] != ref.keep[i];
      kept += ref.keep[i];
      live += ref.probs[i] > 0.0;
    }
    EXPECT_EQ(mismatches, 0) << "dropout mask differs from RngStream::uniform >= p";
    // The draws themselves behave: the kept fraction is near 1 − p (binomial, > 5 sigma slack).
    const double frac = static_cast<double>(kept) / live, p = f.opt.dropout_p;
    EXPECT_NEAR(frac, 1.0 - p, 5.0 * std::sqrt(p * (1 - p) / live) + 1e-3);
  }
}

TEST_P(AttentionCase, LeanBackwardMatchesReference) {
  Fixture f(GetParam());
  f.lean_loss();
  Grads g(f);
  attention_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.out.view(), f.lse.view(), f.q.view(),
                f.k.view(), f.v.view(), f.opt, f.ws.view());
  g.expect_match(f.reference(), kBwdAtol, kBwdRtol, "lean");
}

TEST_P(AttentionCase, ProbsBackwardMatchesReference) {
  Fixture f(GetParam());
  f.probs_loss();
  Grads g(f);
  attention_probs_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.probs.view(), f.mv(), f.q.view(),
                      f.k.view(), f.v.view(), f.opt, f.ws.view());
  g.expect_match(f.reference(), kBwdAtol, kBwdRtol, "probs");
}

TEST_P(AttentionCase, LeanBackwardMatchesFiniteDifferences) {
  Fixture f(GetParam());
  f.lean_loss();
  Grads g(f);
  attention_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.out.view(), f.lse.view(), f.q.view(),
                f.k.view(), f.v.view(), f.opt, f.ws.view());
  expect_fd(f, g, [&] { return f.lean_loss(); }, GetParam().fd_stride, "lean");
}

TEST_P(AttentionCase, ProbsBackwardMatchesFiniteDifferences) {
  Fixture f(GetParam());
  f.probs_loss();
  Grads g(f);
  attention_probs_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.probs.view(), f.mv(), f.q.view(),
                      f.k.view(), f.v.view(), f.opt, f.ws.view());
  expect_fd(f, g, [&] { return f.probs_loss(); }, GetParam().fd_stride, "probs");
}

// Both paths draw the same dropout mask and compute the same function; the backward is
// deterministic run to run and does not depend on how many threads the workspace allows.
TEST_P(AttentionCase, PathsAgreeAndBackwardIsDeterministic) {
  Fixture f(GetParam());
  f.probs_loss();
  const std::vector<double> probs_out = test::to_double(f.out);
  f.lean_loss();
  test::expect_close(f.out.f32(), probs_out, 1e-6, 1e-5, "lean out vs probs out");
  Grads lean(f), again(f), probs(f);
  for (Grads* g : {&lean, &again})
    attention_bwd(g->dq.view(), g->dk.view(), g->dv.view(), f.w.view(), f.out.view(), f.lse.view(), f.q.view(),
                  f.k.view(), f.v.view(), f.opt, f.ws.view());
  f.probs_loss();
  attention_probs_bwd(probs.dq.view(), probs.dk.view(), probs.dv.view(), f.w.view(), f.probs.view(), f.mv(),
                      f.q.view(), f.k.view(), f.v.view(), f.opt, f.ws.view());
  for (auto [a, b, name] : {std::tuple{&lean.dq, &again.dq, "dq"}, {&lean.dk, &again.dk, "dk"},
                            {&lean.dv, &again.dv, "dv"}})
    EXPECT_EQ(a->bytes, b->bytes) << name << " differs between two identical backward runs";
  for (auto [a, b, name] : {std::tuple{&probs.dq, &lean.dq, "dq"}, {&probs.dk, &lean.dk, "dk"},
                            {&probs.dv, &lean.dv, "dv"}})
    test::expect_close(a->f32(), test::to_double(*b), 2e-5, 1e-4, (std::string("probs vs lean ") + name).c_str());
  // A one-thread workspace (no per-head partials) gives the same gradients up to rounding.
  HostTensor small_ws = zeros({static_cast<int64_t>(attention_workspace_floats(f.m.b, f.m.n, f.m.s, f.m.d, 1))});
  Grads single(f);
  attention_bwd(single.dq.view(), single.dk.view(), single.dv.view(), f.w.view(), f.out.view(), f.lse.view(),
                f.q.view(), f.k.view(), f.v.view(), f.opt, small_ws.view());
  for (auto [a, b, name] : {std::tuple{&single.dq, &lean.dq, "dq"}, {&single.dk, &lean.dk, "dk"},
                            {&single.dv, &lean.dv, "dv"}})
    test::expect_close(a->f32(), test::to_double(*b), 1e-5, 1e-5, (std::string("1-thread vs n-thread ") + name).c_str());
}

std::vector<Case> cases() {
  return {
      {"Mha", {2, 3, 3, 13, 10}, 0.0f},
      {"MhaDropout", {2, 3, 3, 13, 10}, 0.3f},
      {"Gqa", {2, 6, 2, 13, 10}, 0.0f, 1.7f},
      {"GqaDropoutShard", {2, 6, 2, 13, 10}, 0.25f, 1.0f, 6, 16},
      {"Mqa", {1, 4, 1, 13, 8}, 0.0f},
      {"MqaDropout", {1, 4, 1, 13, 8}, 0.2f},
      {"SingleToken", {3, 2, 1, 1, 3}, 0.0f, 1.0f, 0, 0, 1},
      {"LongerGqa", {1, 4, 2, 70, 16}, 0.0f, 1.0f, 0, 0, 11},
      {"LongerGqaDropout", {1, 4, 2, 70, 16}, 0.1f, 1.0f, 0, 0, 11},
      {"MultiTile", {1, 2, 2, 150, 16}, 0.1f, 1.0f, 0, 0, 37},
      // Documents (--reset-attention-mask): one-token documents (4, 12) and a row whose last
      // token starts a document; GQA with a tensor-parallel shard's head offset.
      {"MhaDocs", {2, 3, 3, 13, 10}, 0.0f, 1.0f, 0, 0, 3, {{0, 4, 5, 10}, {0, 1, 12}}},
      {"MhaDocsDropout", {2, 3, 3, 13, 10}, 0.3f, 1.0f, 0, 0, 3, {{0, 4, 5, 10}, {0, 1, 12}}},
      {"GqaDocsDropoutShard", {3, 6, 2, 13, 10}, 0.25f, 1.0f, 6, 16, 3, {{0, 6}, {}, {0, 2, 3, 4}}},
      // Starts on both sides of the 64-key tile boundary, a query tile (128..149) whose queries
      // all start after key tile 0, and one starting at its own last token.
      {"MultiTileDocs", {2, 2, 2, 150, 16}, 0.0f, 1.0f, 0, 0, 37, {{0, 30, 64, 65, 100, 149}, {0, 63, 128, 140}}},
      {"MultiTileDocsDropout", {2, 2, 1, 150, 16}, 0.1f, 1.0f, 0, 0, 37, {{0, 30, 64, 65, 100, 149}, {0, 63, 128}}},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionCase, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// With more threads than (batch, group) pairs, the GQA backward splits work by query head into
// per-head dk/dv partials; force that path whatever OMP_NUM_THREADS the suite runs with.
TEST(Attention, GqaBackwardWithMoreThreadsThanGroups) {
#ifndef _OPENMP
  GTEST_SKIP() << "needs OpenMP";
#else
  struct RestoreThreads {
    int saved = omp_get_max_threads();
    ~RestoreThreads() { omp_set_num_threads(saved); }
  } restore;
  omp_set_num_threads(4);
  // b·g = 2 < 4 threads, and enough work (b·n·s²·d/2 > 2^20) for the kernels to go parallel.
  Fixture f(Case{"split", {1, 6, 2, 96, 48}, 0.2f});
  const RefAttention ref = f.reference();
  f.lean_loss();
  Grads lean(f);
  attention_bwd(lean.dq.view(), lean.dk.view(), lean.dv.view(), f.w.view(), f.out.view(), f.lse.view(), f.q.view(),
                f.k.view(), f.v.view(), f.opt, f.ws.view());
  lean.expect_match(ref, kBwdAtol, kBwdRtol, "lean, 4 threads");
  f.probs_loss();
  Grads probs(f);
  attention_probs_bwd(probs.dq.view(), probs.dk.view(), probs.dv.view(), f.w.view(), f.probs.view(), f.mv(),
                      f.q.view(), f.k.view(), f.v.view(), f.opt, f.ws.view());
  probs.expect_match(ref, kBwdAtol, kBwdRtol, "probs, 4 threads");
#endif
}

// key_start all 0 is plain causal attention, bit for bit, in both paths and both directions.
TEST(Attention, KeyStartZeroIsBitIdenticalToCausal) {
  for (float p : {0.0f, 0.2f}) {
    Case c{"zero", {2, 4, 2, 70, 8}, p};
    Fixture plain(c);
    c.docs = {{}};
    Fixture zero(c);
    ASSERT_FALSE(zero.opt.key_start.empty());
    plain.lean_loss();
    zero.lean_loss();
    EXPECT_EQ(plain.out.bytes, zero.out.bytes);
    EXPECT_EQ(plain.lse.bytes, zero.lse.bytes);
    Grads ga(plain), gb(zero);
    attention_bwd(ga.dq.view(), ga.dk.view(), ga.dv.view(), plain.w.view(), plain.out.view(), plain.lse.view(),
                  plain.q.view(), plain.k.view(), plain.v.view(), plain.opt, plain.ws.view());
    attention_bwd(gb.dq.view(), gb.dk.view(), gb.dv.view(), zero.w.view(), zero.out.view(), zero.lse.view(),
                  zero.q.view(), zero.k.view(), zero.v.view(), zero.opt, zero.ws.view());
    EXPECT_TRUE(ga.dq.bytes == gb.dq.bytes && ga.dk.bytes == gb.dk.bytes && ga.dv.bytes == gb.dv.bytes);
    plain.probs_loss();
    zero.probs_loss();
    EXPECT_EQ(plain.out.bytes, zero.out.bytes);
    EXPECT_EQ(plain.probs.bytes, zero.probs.bytes);
    EXPECT_EQ(plain.mask.bytes, zero.mask.bytes);
    Grads pa(plain), pb(zero);
    attention_probs_bwd(pa.dq.view(), pa.dk.view(), pa.dv.view(), plain.w.view(), plain.probs.view(), plain.mv(),
                        plain.q.view(), plain.k.view(), plain.v.view(), plain.opt, plain.ws.view());
    attention_probs_bwd(pb.dq.view(), pb.dk.view(), pb.dv.view(), zero.w.view(), zero.probs.view(), zero.mv(),
                        zero.q.view(), zero.k.view(), zero.v.view(), zero.opt, zero.ws.view());
    EXPECT_TRUE(pa.dq.bytes == pb.dq.bytes && pa.dk.bytes == pb.dk.bytes && pa.dv.bytes == pb.dv.bytes);
  }
}

// The dropout draw of a live (query, key) entry does not depend on where documents start.
TEST(Attention, DocumentsKeepDropoutIndexing) {
  Case c{"drop", {2, 3, 3, 70, 8}, 0.3f};
  Fixture plain(c);
  c.docs = {{0, 9, 64, 66}, {0, 1, 2, 69}};
  Fixture docs(c);
  plain.probs_loss();
  docs.probs_loss();
  const int64_t s = c.m.s;
  int64_t live = 0, differ = 0;
  for (int64_t row = 0; row < c.m.b * c.m.n * s; ++row) {
    const int64_t j = row / (c.m.n * s), i = row % s, lo = docs.key_start.i32()[j * s + i];
    for (int64_t t = 0; t < s; ++t) {
      const uint8_t a = plain.mask.u8()[row * s + t], b = docs.mask.u8()[row * s + t];
      if (t >= lo && t <= i) {
        ++live;
        differ += a != b;
      } else {
        differ += b != 0;  // masked entries are never kept
      }
    }
  }
  EXPECT_GT(live, 0);
  EXPECT_EQ(differ, 0);
}

// The defining property: a document's outputs and gradients are those of the document alone at
// offset 0 (no dropout: its draws are indexed by position in the row).
TEST(Attention, SecondDocumentEqualsItselfAlone) {
  const Dims m{1, 4, 2, 100, 8};
  const int64_t start = 37, len = m.s - start;
  for (bool lean : {true, false}) {
    SCOPED_TRACE(lean ? "lean" : "probs");
    Case c{"two", m, 0.0f};
    c.docs = {{0, start}};
    Fixture both(c);
    Case alone_case{"alone", {1, 4, 2, len, 8}, 0.0f};
    Fixture alone(alone_case);
    // alone's q, k, v, w = both's rows start..s-1.
    auto copy_rows = [&](HostTensor& dst, HostTensor& src, int64_t heads) {
      for (int64_t h = 0; h < heads; ++h)
        std::copy(src.f32() + (h * m.s + start) * m.d, src.f32() + (h * m.s + m.s) * m.d, dst.f32() + h * len * m.d);
    };
    copy_rows(alone.q, both.q, m.n);
    copy_rows(alone.k, both.k, m.g);
    copy_rows(alone.v, both.v, m.g);
    const int64_t width = m.n * m.d;  // b = 1: out/dout rows are [s, n·d]
    std::copy(both.w.f32() + start * width, both.w.f32() + m.s * width, alone.w.f32());
    if (lean) {
      both.lean_loss();
      alone.lean_loss();
    } else {
      both.probs_loss();
      alone.probs_loss();
    }
    std::vector<double> want(alone.out.f32(), alone.out.f32() + alone.out.numel());
    test::expect_close(both.out.f32() + start * width, want, 1e-6, 1e-5, "out of the second document");
    // Gradients: d/dk and d/dv of the second document's keys get nothing from the first one.
    Grads gb(both), ga(alone);
    for (HostTensor* t : {&gb.dq, &gb.dk, &gb.dv, &ga.dq, &ga.dk, &ga.dv}) std::fill(t->bytes.begin(), t->bytes.end(), 0);
    if (lean) {
      attention_bwd(gb.dq.view(), gb.dk.view(), gb.dv.view(), both.w.view(), both.out.view(), both.lse.view(),
                    both.q.view(), both.k.view(), both.v.view(), both.opt, both.ws.view());
      attention_bwd(ga.dq.view(), ga.dk.view(), ga.dv.view(), alone.w.view(), alone.out.view(), alone.lse.view(),
                    alone.q.view(), alone.k.view(), alone.v.view(), alone.opt, alone.ws.view());
    } else {
      attention_probs_bwd(gb.dq.view(), gb.dk.view(), gb.dv.view(), both.w.view(), both.probs.view(), both.mv(),
                          both.q.view(), both.k.view(), both.v.view(), both.opt, both.ws.view());
      attention_probs_bwd(ga.dq.view(), ga.dk.view(), ga.dv.view(), alone.w.view(), alone.probs.view(), alone.mv(),
                          alone.q.view(), alone.k.view(), alone.v.view(), alone.opt, alone.ws.view());
    }
    for (auto [g2, g1, heads, what] : {std::tuple{&gb.dq, &ga.dq, m.n, "dq"}, {&gb.dk, &ga.dk, m.g, "dk"},
                                       {&gb.dv, &ga.dv, m.g, "dv"}}) {
      HostTensor part = test::zeros(g1->shape);
      copy_rows(part, *g2, heads);
      test::expect_close(part.f32(), test::to_double(*g1), 1e-6, 1e-5, what);
    }
  }
}

TEST(Attention, RejectsBadKeyStart) {
  Case c{"bad", {2, 6, 2, 5, 4}, 0.0f};
  c.docs = {{0, 2}};
  Fixture f(c);
  EXPECT_NO_THROW(f.lean_loss());
  EXPECT_NO_THROW(f.probs_loss());
  f.key_start.i32()[3] = 4;  // past query 3 itself
  EXPECT_THROW(f.lean_loss(), Error);
  EXPECT_THROW(f.probs_loss(), Error);
  f.key_start.i32()[3] = -1;
  EXPECT_THROW(f.lean_loss(), Error);
  f.key_start.i32()[3] = 2;
  f.lean_loss();
  Grads g(f);
  f.key_start.i32()[6] = 3;  // row 1, query 1
  EXPECT_THROW(attention_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.out.view(), f.lse.view(),
                             f.q.view(), f.k.view(), f.v.view(), f.opt, f.ws.view()),
               Error);
  EXPECT_THROW(attention_probs_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.probs.view(), f.mv(),
                                   f.q.view(), f.k.view(), f.v.view(), f.opt, f.ws.view()),
               Error);
  f.key_start.i32()[6] = 0;
  HostTensor transposed(DType::i32, {5, 2}), as_f32 = zeros({2, 5});
  f.opt.key_start = transposed.view();
  EXPECT_THROW(f.lean_loss(), Error);
  f.opt.key_start = as_f32.view();
  EXPECT_THROW(f.probs_loss(), Error);
}

TEST(Attention, RejectsBadInputs) {
  Case c{"bad", {2, 6, 2, 5, 4}, 0.1f};
  Fixture f(c);
  auto fwd = [&](const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                 const AttentionOptions& o) { attention_fwd(out, lse, q, k, f.v.view(), o); };
  EXPECT_NO_THROW(fwd(f.out.view(), f.lse.view(), f.q.view(), f.k.view(), f.opt));
  HostTensor q3 = zeros({2, 6, 20}), k4 = zeros({2, 4, 5, 4}), out_bad = zeros({5, 2, 23}), lse_bad = zeros({2, 6, 4});
  EXPECT_THROW(fwd(f.out.view(), f.lse.view(), q3.view(), f.k.view(), f.opt), Error);
  EXPECT_THROW(fwd(f.out.view(), f.lse.view(), f.q.view(), k4.view(), f.opt), Error);  // 6 heads, 4 groups
  EXPECT_THROW(fwd(out_bad.view(), f.lse.view(), f.q.view(), f.k.view(), f.opt), Error);
  EXPECT_THROW(fwd(f.out.view(), lse_bad.view(), f.q.view(), f.k.view(), f.opt), Error);
  AttentionOptions o = f.opt;
  o.dropout_p = 1.0f;
  EXPECT_THROW(fwd(f.out.view(), f.lse.view(), f.q.view(), f.k.view(), o), Error);
  o = f.opt;
  o.head_offset = 4;
  o.total_heads = 8;  // local heads 4..9 exceed 8
  EXPECT_THROW(fwd(f.out.view(), f.lse.view(), f.q.view(), f.k.view(), o), Error);
  // Probs path: dropout needs a mask; the mask must be u8 [b, n, s, s].
  EXPECT_THROW(attention_probs_fwd(f.out.view(), f.probs.view(), {}, f.q.view(), f.k.view(), f.v.view(), f.opt),
               Error);
  HostTensor mask_f32 = zeros(f.probs.shape);
  EXPECT_THROW(attention_probs_fwd(f.out.view(), f.probs.view(), mask_f32.view(), f.q.view(), f.k.view(), f.v.view(),
                                   f.opt),
               Error);
  // Backward: too small a workspace, wrong gradient shapes.
  f.lean_loss();
  Grads g(f);
  HostTensor tiny = zeros({16});
  EXPECT_THROW(attention_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.out.view(), f.lse.view(), f.q.view(),
                             f.k.view(), f.v.view(), f.opt, tiny.view()),
               Error);
  EXPECT_THROW(attention_bwd(g.dk.view(), g.dq.view(), g.dv.view(), f.w.view(), f.out.view(), f.lse.view(), f.q.view(),
                             f.k.view(), f.v.view(), f.opt, f.ws.view()),
               Error);
  EXPECT_THROW(attention_probs_bwd(g.dq.view(), g.dk.view(), g.dv.view(), f.w.view(), f.probs.view(), {}, f.q.view(),
                                   f.k.view(), f.v.view(), f.opt, f.ws.view()),
               Error);
}

}  // namespace
}  // namespace mt
