// CPU kernels for ops/attention.h.  Attention works on tiles of kBq queries × kBk keys: the tile
// products go through small cblas_sgemm calls and the softmax / dropout / dS element work runs in
// contiguous, branch-free loops the compiler vectorises.  The forward keeps its tiles on the stack
// (it takes no workspace); the backward takes per-thread tiles (and, for GQA with few groups, per
// query head dk/dv partials) from the caller's workspace.
#include "backend/cpu/attention.h"

#include "backend/cpu/philox_simd.h"
#include "backend/math/attention_math.h"
#include "base/error.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mt::cpu {

namespace {

constexpr int kBq = 64;  // query rows per tile
constexpr int kBk = 64;  // key columns per tile (lean path)

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Below about a million multiply-adds, a parallel region costs more than it saves (and far more
// on a loaded machine); such calls run on the calling thread.
constexpr int64_t kParallelMinWork = int64_t{1} << 20;
int64_t attention_work(int64_t b, int64_t n, int64_t sq, int64_t sk, int64_t d) { return b * n * sq * sk * d / 2; }

int thread_num() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// exp for the softmax inner loops: backend/math/attention_math.h's attention_exp (a polynomial,
// written without calls so that the loops around it vectorise; std::exp would stay scalar).
inline float fast_exp(float x) { return attention_exp(x); }

// ---- dropout mask -------------------------------------------------------------------------------

// What one attention call needs to draw its dropout mask.
struct Dropout {
  bool on = false;
  RngStream rng;
  float p = 0.0f;
  float inv_keep = 1.0f;   // 1 / (1 − p)
  int64_t total_heads = 0, head_offset = 0, s = 0;
  SeqRows q_rows, k_rows;

  Dropout(const AttentionOptions& o, int64_t n, int64_t seq) {
    on = o.dropout_p > 0.0f;
    rng = o.rng;
    p = o.dropout_p;
    inv_keep = 1.0f / (1.0f - o.dropout_p);
    total_heads = o.total_heads ? o.total_heads : n;
    // The sample offset folds into the head offset: (first_sample + j)·H + o = j·H + (first_sample·H + o).
    head_offset = static_cast<int64_t>(o.first_sample) * total_heads + o.head_offset;
    s = o.seq_length ? o.seq_length : seq;
    q_rows = o.q_rows;
    k_rows = o.k_rows;
  }
  // Index of (batch j, local head h, query row i, key position 0) in the header's formula.
  uint64_t row_index(int64_t j, int64_t h, int64_t i) const {
    return attention_dropout_index(j, h, q_rows.position(i), 0, total_heads, head_offset, s);
  }
  // The dropout multipliers of key rows t0 .. t0 + count − 1 of the row that starts at Philox
  // element `row` (two draws when the keys span both of k_rows' runs).
  void multipliers(uint64_t row, int64_t t0, int64_t count, float* mult) const {
    const int64_t head = std::min(count, std::max<int64_t>(0, k_rows.split - t0));
    if (head > 0) draw<float>(row + k_rows.position(t0), head, mult, inv_keep);
    if (count > head) draw<float>(row + k_rows.position(t0 + head), count - head, mult + head, inv_keep);
  }
  // out[t] = kept ? on : 0 for element first + t, t < count (u8 0/1 masks, or f32 multipliers
  // 1/(1 − p) so the loops that apply them stay all-float and vectorise).
  template <typename T>
  void draw(uint64_t first, int64_t count, T* out, T on) const { philox_keep(rng, first, count, p, on, out); }
  void keep(uint64_t first, int64_t count, uint8_t* mask) const { draw<uint8_t>(first, count, mask, 1); }
};

// ---- document mask ---------------------------------------------------------------------------

// The first key each query attends to: key_start[j, i] (--reset-attention-mask), each checked
// here, outside any parallel region, to lie in [0, i]; or 0 (plain causal).
struct KeyStart {
  const int32_t* p = nullptr;
  int64_t s = 0;
  KeyStart(const AttentionOptions& o, int64_t seq, const char* op) : s(seq) {
    if (o.key_start.empty()) return;
    p = o.key_start.i32();
    for (int64_t k = 0; k < o.key_start.numel(); ++k)
      MT_CHECK(p[k] >= 0 && p[k] <= k % s)
          << op << ": key_start[" << k / s << ", " << k % s << "] = " << p[k] << " must lie in [0, " << k % s
          << "] (a token's document starts at or before it)";
  }
  int64_t operator()(int64_t j, int64_t i) const { return p ? static_cast<int64_t>(p[j * s + i]) : 0; }
  // The smallest start of queries i0 .. i0 + mq − 1: keys before it are masked for the whole tile.
  int64_t tile_min(int64_t j, int64_t i0, int64_t mq) const {
    if (!p) return 0;
    int64_t lo = i0;
    for (int64_t ii = 0; ii < mq; ++ii) lo = std::min<int64_t>(lo, p[j * s + i0 + ii]);
    return lo;
  }
};

// ---- row kernels -------------------------------------------------------------------------------

// max(mx, x[0..n)).  Written as a compare-select under `omp simd reduction(max)`: that form GCC
// turns into vmaxps; std::max, or the same loop without the pragma, stays a scalar dependent chain.
inline float row_max(const float* x, int64_t n, float mx) {
#pragma omp simd reduction(max : mx)
  for (int64_t t = 0; t < n; ++t) mx = mx > x[t] ? mx : x[t];
  return mx;
}

// One row of the lean backward, in place: s holds scale·q·k on entry, ds = dout·v:
//   P = exp(s − lse);  s ← P·mult (the dropped P, for dV);  ds ← P·(ds·mult − D) (dS).
// mult = dropout multipliers, or nullptr for none.
void softmax_grad_row(float* __restrict s, float* __restrict ds, const float* __restrict mult, int64_t n, float lse,
                      float dsum) {
  if (mult) {
#pragma omp simd
    for (int64_t t = 0; t < n; ++t) {
      const float p = fast_exp(s[t] - lse);
      s[t] = p * mult[t];
      ds[t] = softmax_grad(p, ds[t] * mult[t], dsum);
    }
  } else {
#pragma omp simd
    for (int64_t t = 0; t < n; ++t) {
      const float p = fast_exp(s[t] - lse);
      s[t] = p;
      ds[t] = softmax_grad(p, ds[t], dsum);
    }
  }
}

// ---- shapes shared by the kernels ------------------------------------------------------------

// s: query rows (sq); sk: key rows (s outside context parallelism).
struct Dims {
  int64_t b, n, g, r, s, sk, d;
  int64_t ldo;  // row stride of out / dout [s, b, n·d]
  explicit Dims(const TensorView& q, const TensorView& k)
      : b(q.dim(0)), n(q.dim(1)), g(k.dim(1)), r(q.dim(1) / k.dim(1)), s(q.dim(2)), sk(k.dim(2)), d(q.dim(3)),
        ldo(q.dim(0) * q.dim(1) * q.dim(3)) {}
  int64_t head(int64_t j, int64_t h) const { return (j * n + h) * s * d; }       // into q / dq
  int64_t group(int64_t j, int64_t gi) const { return (j * g + gi) * sk * d; }   // into k, v / dk, dv
  int64_t out_row(int64_t j, int64_t h, int64_t i) const { return (i * b + j) * n * d + h * d; }  // into out
};

inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// Backward driver shared by both paths.  head_fn(j, h, dk_rows, dv_rows, tiles) adds query head h's
// contribution to dq (which it owns) and to the given dk/dv rows [s, d].  Query heads of one group
// all add into that group's dk/dv, so work is split by (batch, group), each task running its heads
// in order; when that leaves threads idle (GQA/MQA with b·g < threads) it is split by (batch, head)
// into per-head partials in the workspace, summed afterwards in head order.  Either way there are
// no races and the result does not depend on scheduling.
size_t partial_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads) {
  return threads > b ? static_cast<size_t>(2 * b * n * s * d) : 0;
}

template <typename HeadFn>
void run_backward(const Dims& dm, const TensorView& dk, const TensorView& dv, const TensorView& workspace,
                  HeadFn&& head_fn) {
  const int64_t s = std::max(dm.s, dm.sk);  // the workspace formula's s
  const size_t per_thread = attention_workspace_floats_per_thread(dm.b, dm.n, s, dm.d);
  int threads = attention_work(dm.b, dm.n, dm.s, dm.sk, dm.d) < kParallelMinWork ? 1 : std::max(1, max_threads());
  auto need = [&](int t) { return attention_workspace_floats(dm.b, dm.n, s, dm.d, t); };
  while (threads > 1 && need(threads) > static_cast<size_t>(workspace.numel())) --threads;
  float* ws = workspace.f32();
  float* dkp = dk.f32();
  float* dvp = dv.f32();
  const int64_t sd = dm.sk * dm.d;

  if (dm.r == 1 || dm.b * dm.g >= threads) {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t task = 0; task < dm.b * dm.g; ++task) {
      const int64_t j = task / dm.g, gi = task % dm.g;
      float* tiles = ws + thread_num() * per_thread;
      for (int64_t hh = 0; hh < dm.r; ++hh)
        head_fn(j, gi * dm.r + hh, dkp + dm.group(j, gi), dvp + dm.group(j, gi), tiles);
    }
    return;
  }
  float* part_dk = ws + threads * per_thread;  // [b, n, s, d]
  float* part_dv = part_dk + dm.b * dm.n * sd;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t task = 0; task < dm.b * dm.n; ++task) {
    float* pk = part_dk + task * sd;
    float* pv = part_dv + task * sd;
    std::memset(pk, 0, sd * sizeof(float));
    std::memset(pv, 0, sd * sizeof(float));
    head_fn(task / dm.n, task % dm.n, pk, pv, ws + thread_num() * per_thread);
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t row = 0; row < dm.b * dm.g * dm.sk; ++row) {
    const int64_t jg = row / dm.sk, i = row % dm.sk;  // jg = j·g + gi; its heads are jg·r .. jg·r + r − 1
    float* gk = dkp + jg * sd + i * dm.d;
    float* gv = dvp + jg * sd + i * dm.d;
    for (int64_t hh = 0; hh < dm.r; ++hh) {
      const float* pk = part_dk + (jg * dm.r + hh) * sd + i * dm.d;
      const float* pv = part_dv + (jg * dm.r + hh) * sd + i * dm.d;
      for (int64_t c = 0; c < dm.d; ++c) {
        gk[c] += pk[c];
        gv[c] += pv[c];
      }
    }
  }
}

// The RoPE table row of each (i, j): positions[j, i] when given (each checked against the table's
// rows here, outside any parallel region), else i.
struct RopePositions {
  const int32_t* pos = nullptr;
  int64_t s = 0;
  RopePositions(const TensorView& positions, const TensorView& cos, int64_t seq, const char* op) : s(seq) {
    if (positions.empty() || cos.empty()) return;
    pos = positions.i32();
    const int64_t limit = cos.dim(0);
    for (int64_t k = 0; k < positions.numel(); ++k)
      MT_CHECK(pos[k] >= 0 && pos[k] < limit)
          << op << ": positions[" << k / s << ", " << k % s << "] = " << pos[k] << " is out of range [0, " << limit
          << ") of the RoPE tables (--max-position-embeddings)";
  }
  int64_t operator()(int64_t i, int64_t j) const { return pos ? static_cast<int64_t>(pos[j * s + i]) : i; }
};

}  // namespace

size_t attention_workspace_floats_per_thread(int64_t b, int64_t n, int64_t s, int64_t d) {
  // Lean path: two [kBq, kBk] tiles; probs path: two [kBq, s] panels.
  return static_cast<size_t>(2 * kBq * std::max<int64_t>(s, kBk));
}

size_t attention_workspace_floats(int64_t b, int64_t n, int64_t s, int64_t d, int threads) {
  threads = std::max(threads, 1);
  return threads * attention_workspace_floats_per_thread(b, n, s, d) + partial_floats(b, n, s, d, threads);
}

// ---- RoPE and the QKV split ------------------------------------------------------------------

void rope_tables(const TensorView& cos, const TensorView& sin, double base, int64_t rotary_dim) {
  const int64_t positions = cos.dim(0), half = cos.dim(1), d = rotary_dim;
  float* c = cos.f32();
  float* s = sin.f32();
#pragma omp parallel for schedule(static) if (positions * half >= (int64_t{1} << 16))
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * std::pow(base, -2.0 * static_cast<double>(i) / d);
      c[p * half + i] = static_cast<float>(std::cos(angle));
      s[p * half + i] = static_cast<float>(std::sin(angle));
    }
}

void qkv_split_rope_fwd(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& qkv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form) {
  const Dims dm(q, k);
  const RopePositions position(positions, cos, dm.s, "qkv_split_rope_fwd");
  const bool rope = !cos.empty();
  // half: the rotated pairs (the tables' columns); elements 2·half .. d − 1 pass through.
  const int64_t half = rope ? cos.dim(1) : 0, width = (dm.n + 2 * dm.g) * dm.d;
  const bool interleaved = form == RopeForm::interleaved;
  const float* src_all = qkv.f32();
  float* qp = q.f32();
  float* kp = k.f32();
  float* vp = v.f32();
  const float* cp = rope ? cos.f32() : nullptr;
  const float* sp = rope ? sin.f32() : nullptr;
#pragma omp parallel for schedule(static) if (dm.s * dm.b * width >= kParallelMinWork)
  for (int64_t row = 0; row < dm.s * dm.b; ++row) {
    const int64_t i = row / dm.b, j = row % dm.b;
    const float* src = src_all + row * width;
    const float* ci = rope ? cp + position(i, j) * half : nullptr;
    const float* si = rope ? sp + position(i, j) * half : nullptr;
    auto put = [&](float* dst, const float* x, bool rotate) {
      if (!rotate) {
        std::memcpy(dst, x, dm.d * sizeof(float));
        return;
      }
      // Two loops, each with its pairing fixed, so that the rotate-half one vectorises as before.
      const auto rotate_pairs = [&](auto form_is_interleaved) {
        for (int64_t c = 0; c < half; ++c) {
          int64_t a, b;
          rope_pair(c, half, form_is_interleaved.value, a, b);
          rope_rotate(x[a], x[b], ci[c], si[c], dst[a], dst[b]);
        }
      };
      if (interleaved) rotate_pairs(std::true_type{});
      else rotate_pairs(std::false_type{});
      if (2 * half < dm.d) std::memcpy(dst + 2 * half, x + 2 * half, (dm.d - 2 * half) * sizeof(float));
    };
    for (int64_t gi = 0; gi < dm.g; ++gi) {
      const float* grp = src + gi * (dm.r + 2) * dm.d;
      for (int64_t hh = 0; hh < dm.r; ++hh) put(qp + dm.head(j, gi * dm.r + hh) + i * dm.d, grp + hh * dm.d, rope);
      put(kp + dm.group(j, gi) + i * dm.d, grp + dm.r * dm.d, rope);
      put(vp + dm.group(j, gi) + i * dm.d, grp + (dm.r + 1) * dm.d, false);
    }
  }
}

void qkv_split_rope_bwd(const TensorView& dqkv, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                        const TensorView& cos, const TensorView& sin, const TensorView& positions, RopeForm form) {
  const Dims dm(dq, dk);
  const RopePositions position(positions, cos, dm.s, "qkv_split_rope_bwd");
  const bool rope = !cos.empty();
  const int64_t half = rope ? cos.dim(1) : 0, width = (dm.n + 2 * dm.g) * dm.d;
  const bool interleaved = form == RopeForm::interleaved;
  float* dst_all = dqkv.f32();
  const float* qp = dq.f32();
  const float* kp = dk.f32();
  const float* vp = dv.f32();
  const float* cp = rope ? cos.f32() : nullptr;
  const float* sp = rope ? sin.f32() : nullptr;
#pragma omp parallel for schedule(static) if (dm.s * dm.b * width >= kParallelMinWork)
  for (int64_t row = 0; row < dm.s * dm.b; ++row) {
    const int64_t i = row / dm.b, j = row % dm.b;
    float* dst = dst_all + row * width;
    const float* ci = rope ? cp + position(i, j) * half : nullptr;
    const float* si = rope ? sp + position(i, j) * half : nullptr;
    // The rotation is orthogonal, so its backward is the rotation by −angle.
    auto add = [&](float* dx, const float* dy, bool rotate) {
      if (!rotate) {
        for (int64_t c = 0; c < dm.d; ++c) dx[c] += dy[c];
        return;
      }
      const auto rotate_pairs_back = [&](auto form_is_interleaved) {
        for (int64_t c = 0; c < half; ++c) {
          int64_t a, b;
          rope_pair(c, half, form_is_interleaved.value, a, b);
          rope_rotate_back_add(dy[a], dy[b], ci[c], si[c], dx[a], dx[b]);
        }
      };
      if (interleaved) rotate_pairs_back(std::true_type{});
      else rotate_pairs_back(std::false_type{});
      for (int64_t c = 2 * half; c < dm.d; ++c) dx[c] += dy[c];
    };
    for (int64_t gi = 0; gi < dm.g; ++gi) {
      float* grp = dst + gi * (dm.r + 2) * dm.d;
      for (int64_t hh = 0; hh < dm.r; ++hh) add(grp + hh * dm.d, qp + dm.head(j, gi * dm.r + hh) + i * dm.d, rope);
      add(grp + dm.r * dm.d, kp + dm.group(j, gi) + i * dm.d, rope);
      add(grp + (dm.r + 1) * dm.d, vp + dm.group(j, gi) + i * dm.d, false);
    }
  }
}

// ---- lean path: online softmax ---------------------------------------------------------------

void attention_fwd(const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options) {
  const Dims dm(q, k);
  const Dropout drop(options, dm.n, dm.s);
  const KeyStart key_start(options, dm.s, "attention_fwd");
  const SeqRows& q_rows = options.q_rows;
  const SeqRows& k_rows = options.k_rows;
  const float scale = options.scale;
  const int64_t nqb = (dm.s + kBq - 1) / kBq;
  const float* qa = q.f32();
  const float* ka = k.f32();
  const float* va = v.f32();
  float* oa = out.f32();
  float* la = lse.f32();

  // Tasks in decreasing query-block order: the long causal rows start first.
  const bool parallel = attention_work(dm.b, dm.n, dm.s, dm.sk, dm.d) >= kParallelMinWork;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t task = 0; task < dm.b * dm.n * nqb; ++task) {
    const int64_t qb = nqb - 1 - task / (dm.b * dm.n), jh = task % (dm.b * dm.n);
    const int64_t j = jh / dm.n, h = jh % dm.n, gi = h / dm.r;
    const int64_t i0 = qb * kBq, mq = std::min<int64_t>(kBq, dm.s - i0);
    // Keys the tile's last (latest) query sees; the others see a prefix of them.
    const int64_t kend = k_rows.visible(q_rows.position(i0 + mq - 1), dm.sk);
    const float* qp = qa + dm.head(j, h) + i0 * dm.d;
    const float* kp = ka + dm.group(j, gi);
    const float* vp = va + dm.group(j, gi);
    float* op = oa + dm.out_row(j, h, i0);

    alignas(64) float tile[kBq * kBk];
    alignas(64) float mult[kBk];  // dropout multipliers of one tile row
    float m[kBq], l[kBq];
    for (int64_t ii = 0; ii < mq; ++ii) {
      m[ii] = -std::numeric_limits<float>::infinity();
      l[ii] = 0.0f;
      std::memset(op + ii * dm.ldo, 0, dm.d * sizeof(float));
    }
    // Key tiles wholly before every query's document start are skipped (same tile grid as without).
    for (int64_t t0 = key_start.tile_min(j, i0, mq) / kBk * kBk; t0 < kend; t0 += kBk) {
      const int64_t nk = std::min<int64_t>(kBk, kend - t0);
      gemm(CblasNoTrans, CblasTrans, mq, nk, dm.d, scale, qp, dm.d, kp + t0 * dm.d, dm.d, 0.0f, tile, kBk);
      for (int64_t ii = 0; ii < mq; ++ii) {
        float* row = tile + ii * kBk;
        // Live columns [first, valid): keys key_start <= t, at or before the query's position.
        const int64_t valid = std::min<int64_t>(nk, k_rows.visible(q_rows.position(i0 + ii), dm.sk) - t0);
        const int64_t first = std::max<int64_t>(0, key_start(j, i0 + ii) - t0);
        if (valid <= first) {
          std::memset(row, 0, nk * sizeof(float));
          continue;
        }
        std::memset(row, 0, first * sizeof(float));
        float* live = row + first;
        const int64_t nlive = valid - first;
        const float mx = row_max(live, nlive, m[ii]);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t t = 0; t < nlive; ++t) {
          live[t] = fast_exp(live[t] - mx);
          sum += live[t];
        }
        for (int64_t t = valid; t < nk; ++t) row[t] = 0.0f;
        // Rescale what is accumulated so far to the new running max.
        if (mx != m[ii]) {
          const float corr = online_softmax_rescale(m[ii], mx);  // 0 on the first block (m = −inf)
          float* o = op + ii * dm.ldo;
          for (int64_t c = 0; c < dm.d; ++c) o[c] *= corr;
          l[ii] *= corr;
          m[ii] = mx;
        }
        l[ii] += sum;  // the normaliser uses the probabilities before dropout
        if (drop.on) {
          drop.multipliers(drop.row_index(j, h, i0 + ii), t0 + first, nlive, mult);
#pragma omp simd
          for (int64_t t = 0; t < nlive; ++t) live[t] *= mult[t];
        }
      }
      gemm(CblasNoTrans, CblasNoTrans, mq, dm.d, nk, 1.0f, tile, kBk, vp + t0 * dm.d, dm.d, 1.0f, op, dm.ldo);
    }
    for (int64_t ii = 0; ii < mq; ++ii) {
      float* lrow = la + (j * dm.n + h) * dm.s + i0 + ii;
      if (l[ii] == 0.0f) {  // no visible key (context parallelism): out stays 0
        *lrow = -std::numeric_limits<float>::infinity();
        continue;
      }
      const float inv = 1.0f / l[ii];
      float* o = op + ii * dm.ldo;
      for (int64_t c = 0; c < dm.d; ++c) o[c] *= inv;
      *lrow = online_softmax_lse(m[ii], l[ii]);
    }
  }
}

void attention_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                   const TensorView& out, const TensorView& lse, const TensorView& q, const TensorView& k,
                   const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  const Dims dm(q, k);
  const Dropout drop(options, dm.n, dm.s);
  const KeyStart key_start(options, dm.s, "attention_bwd");
  const SeqRows& q_rows = options.q_rows;
  const SeqRows& k_rows = options.k_rows;
  const float scale = options.scale;
  const float* qa = q.f32();
  const float* ka = k.f32();
  const float* va = v.f32();
  const float* oa = out.f32();
  const float* goa = dout.f32();
  const float* la = lse.f32();
  float* dqa = dq.f32();

  auto head_fn = [&](int64_t j, int64_t h, float* dkp, float* dvp, float* tiles) {
    const int64_t gi = h / dm.r;
    const float* kp = ka + dm.group(j, gi);
    const float* vp = va + dm.group(j, gi);
    float* pt = tiles;              // P, then the dropped P  [kBq, kBk]
    float* st = tiles + kBq * kBk;  // dP, then dS            [kBq, kBk]
    alignas(64) float mult[kBk];  // dropout multipliers of one tile row
    float rowd[kBq];
    for (int64_t i0 = 0; i0 < dm.s; i0 += kBq) {
      const int64_t mq = std::min<int64_t>(kBq, dm.s - i0);
      const int64_t kend = k_rows.visible(q_rows.position(i0 + mq - 1), dm.sk);
      if (kend <= 0) continue;  // no query of the tile sees a key
      const float* qp = qa + dm.head(j, h) + i0 * dm.d;
      float* dqp = dqa + dm.head(j, h) + i0 * dm.d;
      const float* gop = goa + dm.out_row(j, h, i0);
      const float* op = oa + dm.out_row(j, h, i0);
      const float* lp = la + (j * dm.n + h) * dm.s + i0;
      // D_i = dout_i · out_i  (= Σ_t P_it dP_it, the softmax backward's row term).
      for (int64_t ii = 0; ii < mq; ++ii) {
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < dm.d; ++c) acc += gop[ii * dm.ldo + c] * op[ii * dm.ldo + c];
        rowd[ii] = acc;
      }
      for (int64_t t0 = key_start.tile_min(j, i0, mq) / kBk * kBk; t0 < kend; t0 += kBk) {
        const int64_t nk = std::min<int64_t>(kBk, kend - t0);
        gemm(CblasNoTrans, CblasTrans, mq, nk, dm.d, scale, qp, dm.d, kp + t0 * dm.d, dm.d, 0.0f, pt, kBk);
        gemm(CblasNoTrans, CblasTrans, mq, nk, dm.d, 1.0f, gop, dm.ldo, vp + t0 * dm.d, dm.d, 0.0f, st, kBk);
        for (int64_t ii = 0; ii < mq; ++ii) {
          float* prow = pt + ii * kBk;
          float* srow = st + ii * kBk;
          // Live columns [first, valid), as in the forward.
          const int64_t valid =
              std::max<int64_t>(0, std::min<int64_t>(nk, k_rows.visible(q_rows.position(i0 + ii), dm.sk) - t0));
          const int64_t first = std::min(valid, std::max<int64_t>(0, key_start(j, i0 + ii) - t0));
          const int64_t nlive = valid - first;
          const float li = lp[ii], di = rowd[ii];
          if (drop.on && nlive > 0) {
            drop.multipliers(drop.row_index(j, h, i0 + ii), t0 + first, nlive, mult);
            softmax_grad_row(prow + first, srow + first, mult, nlive, li, di);
          } else {
            softmax_grad_row(prow + first, srow + first, nullptr, nlive, li, di);
          }
          for (int64_t t = 0; t < first; ++t) prow[t] = srow[t] = 0.0f;
          for (int64_t t = valid; t < nk; ++t) prow[t] = srow[t] = 0.0f;
        }
        gemm(CblasTrans, CblasNoTrans, nk, dm.d, mq, 1.0f, pt, kBk, gop, dm.ldo, 1.0f, dvp + t0 * dm.d, dm.d);
        gemm(CblasTrans, CblasNoTrans, nk, dm.d, mq, scale, st, kBk, qp, dm.d, 1.0f, dkp + t0 * dm.d, dm.d);
        gemm(CblasNoTrans, CblasNoTrans, mq, dm.d, nk, scale, st, kBk, kp + t0 * dm.d, dm.d, 1.0f, dqp, dm.d);
      }
    }
  };
  run_backward(dm, dk, dv, workspace, head_fn);
}

void attention_merge(const TensorView& out, const TensorView& lse, const TensorView& out_part,
                     const TensorView& lse_part) {
  const int64_t b = lse.dim(0), n = lse.dim(1), s = lse.dim(2), d = out.dim(2) / n;
  float* oa = out.f32();
  float* la = lse.f32();
  const float* pa = out_part.f32();
  const float* pl = lse_part.f32();
#pragma omp parallel for schedule(static) if (b * n * s * d >= kParallelMinWork)
  for (int64_t row = 0; row < b * n * s; ++row) {
    const int64_t j = row / (n * s), h = row / s % n, i = row % s;
    float c, wa, wb;
    lse_merge(la[row], pl[row], c, wa, wb);
    la[row] = c;
    float* o = oa + (i * b + j) * n * d + h * d;
    const float* p = pa + (i * b + j) * n * d + h * d;
    for (int64_t e = 0; e < d; ++e) o[e] = o[e] * wa + p[e] * wb;
  }
}

// ---- materialising path ----------------------------------------------------------------------

void attention_probs_fwd(const TensorView& out, const TensorView& probs, const TensorView& mask,
                         const TensorView& q, const TensorView& k, const TensorView& v,
                         const AttentionOptions& options) {
  const Dims dm(q, k);
  const Dropout drop(options, dm.n, dm.s);
  const KeyStart key_start(options, dm.s, "attention_probs_fwd");
  const int64_t nqb = (dm.s + kBq - 1) / kBq;
  const float* qa = q.f32();
  const float* ka = k.f32();
  const float* va = v.f32();
  float* oa = out.f32();
  float* pa = probs.f32();
  uint8_t* ma = drop.on ? mask.u8() : nullptr;

  const bool parallel = attention_work(dm.b, dm.n, dm.s, dm.sk, dm.d) >= kParallelMinWork;
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int64_t task = 0; task < dm.b * dm.n * nqb; ++task) {
    const int64_t qb = nqb - 1 - task / (dm.b * dm.n), jh = task % (dm.b * dm.n);
    const int64_t j = jh / dm.n, h = jh % dm.n, gi = h / dm.r;
    const int64_t i0 = qb * kBq, mq = std::min<int64_t>(kBq, dm.s - i0), kend = i0 + mq;
    const float* qp = qa + dm.head(j, h) + i0 * dm.d;
    const float* kp = ka + dm.group(j, gi);
    const float* vp = va + dm.group(j, gi);
    float* op = oa + dm.out_row(j, h, i0);
    const int64_t panel_at = ((j * dm.n + h) * dm.s + i0) * dm.s;
    float* panel = pa + panel_at;  // rows i0 .. i0 + mq − 1 of this head's [s, s] probabilities
    uint8_t* mpanel = drop.on ? ma + panel_at : nullptr;

    gemm(CblasNoTrans, CblasTrans, mq, kend, dm.d, options.scale, qp, dm.d, kp, dm.d, 0.0f, panel, dm.s);
    for (int64_t ii = 0; ii < mq; ++ii) {
      // Live keys [lo, valid): the query's document up to itself.
      const int64_t lo = key_start(j, i0 + ii), valid = i0 + ii + 1;
      float* row = panel + ii * dm.s;
      float* live = row + lo;
      const int64_t nlive = valid - lo;
      const float mx = row_max(live, nlive, live[0]);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t t = 0; t < nlive; ++t) {
        live[t] = fast_exp(live[t] - mx);
        sum += live[t];
      }
      const float inv = 1.0f / sum;
      for (int64_t t = 0; t < nlive; ++t) live[t] *= inv;
      std::memset(row, 0, lo * sizeof(float));
      std::memset(row + valid, 0, (dm.s - valid) * sizeof(float));
      if (drop.on) {
        uint8_t* mrow = mpanel + ii * dm.s;
        drop.keep(drop.row_index(j, h, i0 + ii) + lo, nlive, mrow + lo);
        std::memset(mrow, 0, lo);
        std::memset(mrow + valid, 0, dm.s - valid);
      }
    }
    if (!drop.on) {
      gemm(CblasNoTrans, CblasNoTrans, mq, dm.d, kend, 1.0f, panel, dm.s, vp, dm.d, 0.0f, op, dm.ldo);
      continue;
    }
    // out = (P ⊙ mask / (1 − p)) · V, a key tile at a time so the dropped P never needs a panel.
    alignas(64) float tile[kBq * kBk];
    for (int64_t t0 = 0; t0 < kend; t0 += kBk) {
      const int64_t nk = std::min<int64_t>(kBk, kend - t0);
      for (int64_t ii = 0; ii < mq; ++ii)
        for (int64_t t = 0; t < nk; ++t)
          tile[ii * kBk + t] =
              panel[ii * dm.s + t0 + t] * static_cast<float>(mpanel[ii * dm.s + t0 + t]) * drop.inv_keep;
      gemm(CblasNoTrans, CblasNoTrans, mq, dm.d, nk, 1.0f, tile, kBk, vp + t0 * dm.d, dm.d, t0 ? 1.0f : 0.0f, op,
           dm.ldo);
    }
  }
}

void attention_probs_bwd(const TensorView& dq, const TensorView& dk, const TensorView& dv, const TensorView& dout,
                         const TensorView& probs, const TensorView& mask, const TensorView& q, const TensorView& k,
                         const TensorView& v, const AttentionOptions& options, const TensorView& workspace) {
  const Dims dm(q, k);
  const Dropout drop(options, dm.n, dm.s);
  const KeyStart key_start(options, dm.s, "attention_probs_bwd");
  const float scale = options.scale;
  const float* qa = q.f32();
  const float* ka = k.f32();
  const float* va = v.f32();
  const float* goa = dout.f32();
  const float* pa = probs.f32();
  const uint8_t* ma = drop.on ? mask.u8() : nullptr;
  float* dqa = dq.f32();

  auto head_fn = [&](int64_t j, int64_t h, float* dkp, float* dvp, float* tiles) {
    const int64_t gi = h / dm.r;
    const float* kp = ka + dm.group(j, gi);
    const float* vp = va + dm.group(j, gi);
    float* ds = tiles;                 // dP, then dS      [kBq, s]
    float* pd = tiles + kBq * dm.s;    // dropped P        [kBq, s]
    for (int64_t i0 = 0; i0 < dm.s; i0 += kBq) {
      const int64_t mq = std::min<int64_t>(kBq, dm.s - i0), kend = i0 + mq;
      const float* qp = qa + dm.head(j, h) + i0 * dm.d;
      float* dqp = dqa + dm.head(j, h) + i0 * dm.d;
      const float* gop = goa + dm.out_row(j, h, i0);
      const int64_t panel_at = ((j * dm.n + h) * dm.s + i0) * dm.s;
      const float* pp = pa + panel_at;
      gemm(CblasNoTrans, CblasTrans, mq, kend, dm.d, 1.0f, gop, dm.ldo, vp, dm.d, 0.0f, ds, dm.s);
      for (int64_t ii = 0; ii < mq; ++ii) {
        const float* prow = pp + ii * dm.s;
        float* srow = ds + ii * dm.s;
        const int64_t lo = key_start(j, i0 + ii), valid = i0 + ii + 1;  // live keys [lo, valid)
        if (drop.on) {
          const uint8_t* mrow = ma + panel_at + ii * dm.s;
          float* drow = pd + ii * dm.s;
          for (int64_t t = 0; t < lo; ++t) drow[t] = 0.0f;
          for (int64_t t = lo; t < valid; ++t) {
            const float kp_t = static_cast<float>(mrow[t]) * drop.inv_keep;
            srow[t] *= kp_t;
            drow[t] = prow[t] * kp_t;
          }
          for (int64_t t = valid; t < kend; ++t) drow[t] = 0.0f;
        }
        float di = 0.0f;  // Σ_t P_it dP_it
#pragma omp simd reduction(+ : di)
        for (int64_t t = lo; t < valid; ++t) di += prow[t] * srow[t];
        for (int64_t t = lo; t < valid; ++t) srow[t] = softmax_grad(prow[t], srow[t], di);
        for (int64_t t = 0; t < lo; ++t) srow[t] = 0.0f;
        for (int64_t t = valid; t < kend; ++t) srow[t] = 0.0f;
      }
      // Without dropout the saved probabilities (zero above the diagonal) are used as they are.
      const float* pdrop = drop.on ? pd : pp;
      gemm(CblasTrans, CblasNoTrans, kend, dm.d, mq, 1.0f, pdrop, dm.s, gop, dm.ldo, 1.0f, dvp, dm.d);
      gemm(CblasTrans, CblasNoTrans, kend, dm.d, mq, scale, ds, dm.s, qp, dm.d, 1.0f, dkp, dm.d);
      gemm(CblasNoTrans, CblasNoTrans, mq, dm.d, kend, scale, ds, dm.s, kp, dm.d, 1.0f, dqp, dm.d);
    }
  };
  run_backward(dm, dk, dv, workspace, head_fn);
}

}  // namespace mt::cpu
