// CPU kernel for the grouped expert MLP (ops/moe_experts.h, impl = grouped): every expert's
// fc1 → activation → fc2 in one OpenMP region.
//
// Why tiles of single-threaded sgemm rather than one multi-threaded sgemm per expert: with
// fine-grained experts (E = 64, a few hundred rows each) each GEMM is too small to split well, and
// every call would fork and join OpenBLAS's threads; a skewed routing leaves some experts with most
// of the rows. So the work is cut into tiles — row ranges of an expert's group for the forward and
// the input gradient, output-row ranges of an expert's weight for the weight gradients (the
// reduction over rows stays whole in one call) — and the threads take tiles dynamically. Inside the
// region OpenBLAS (its OpenMP build, the one the project links) runs each call on the calling
// thread. Debian 12's OpenBLAS 0.3.21 has no batched sgemm (its cblas.h declares no sgemm_batch), and a
// batch call would not split a skewed expert anyway.
//
// With one thread every expert is one tile, and the calls are exactly those of the sequential loop
// (ops/linear's sgemm, or its sgemv for a one-row expert), so the two agree bit for bit.
#include "backend/cpu/moe_experts.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/activation.h"

namespace mt::cpu {

namespace {

constexpr int64_t kMinTileRows = 64;  // below this a tile's sgemm is mostly packing and call overhead
constexpr int64_t kTilesPerThread = 4;  // enough tiles that the dynamic schedule evens out skew

struct Tile {
  int64_t expert, begin, count;  // rows [begin, begin + count): of the permuted rows or of a weight
};

std::vector<int64_t> offsets_of(const int32_t* counts, int64_t experts) {
  std::vector<int64_t> off(static_cast<size_t>(experts + 1), 0);
  for (int64_t e = 0; e < experts; ++e) off[e + 1] = off[e] + counts[e];
  return off;
}

// Each nonempty expert's rows cut into near-equal tiles of at least kMinTileRows (one tile per
// expert on one thread).
std::vector<Tile> row_tiles(const std::vector<int64_t>& off, int threads) {
  const int64_t experts = static_cast<int64_t>(off.size()) - 1, total = off.back();
  const int64_t target =
      threads == 1 ? total : std::max(kMinTileRows, (total + kTilesPerThread * threads - 1) / (kTilesPerThread * threads));
  std::vector<Tile> tiles;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t n = off[e + 1] - off[e];
    if (n == 0) continue;
    const int64_t pieces = std::max<int64_t>(1, (n + target - 1) / target);
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t b = n * p / pieces, end = n * (p + 1) / pieces;
      tiles.push_back({e, off[e] + b, end - b});
    }
  }
  return tiles;
}

// Output-row ranges of each nonempty expert's [out, in] weight gradient, in proportion to the
// expert's share of the rows (one range per expert on one thread).
std::vector<Tile> weight_tiles(const std::vector<int64_t>& off, int64_t out_rows, int threads) {
  const int64_t experts = static_cast<int64_t>(off.size()) - 1, total = off.back();
  std::vector<Tile> tiles;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t n = off[e + 1] - off[e];
    if (n == 0) continue;
    int64_t pieces = 1;
    if (threads > 1) {
      pieces = (kTilesPerThread * threads * n + total - 1) / total;
      pieces = std::clamp<int64_t>(pieces, 1, std::max<int64_t>(1, out_rows / 16));
    }
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t b = out_rows * p / pieces, end = out_rows * (p + 1) / pieces;
      tiles.push_back({e, b, end - b});
    }
  }
  return tiles;
}

// y[n, o] = x[n, in] · w[o, in]ᵀ, as cpu::linear_fwd computes it without bias (sgemv for one row).
void forward_gemm(float* y, const float* x, const float* w, int64_t n, int64_t o, int64_t in) {
  const int ni = static_cast<int>(n), oi = static_cast<int>(o), ii = static_cast<int>(in);
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, oi, ii, 1.0f, w, ii, x, 1, 0.0f, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ni, oi, ii, 1.0f, x, ii, w, ii, 0.0f, y, oi);
}

// dx[n, in] += dy[n, o] · w[o, in], as cpu::linear_bwd's input gradient.
void input_grad_gemm(float* dx, const float* dy, const float* w, int64_t n, int64_t o, int64_t in) {
  const int ni = static_cast<int>(n), oi = static_cast<int>(o), ii = static_cast<int>(in);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ii, oi, 1.0f, dy, oi, w, ii, 1.0f, dx, ii);
}

// dw[o0 : o0 + oc, in] += dy[n, o0 : o0 + oc]ᵀ · x[n, in] (dy's rows are o wide); with o0 = 0 and
// oc = o this is cpu::linear_bwd's weight gradient call.
void weight_grad_gemm(float* dw, const float* dy, const float* x, int64_t n, int64_t o, int64_t in, int64_t o0,
                      int64_t oc) {
  const int ni = static_cast<int>(n), oi = static_cast<int>(o), ii = static_cast<int>(in), ci = static_cast<int>(oc);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ci, ii, ni, 1.0f, dy + o0, oi, x, ii, 1.0f, dw + o0 * in, ii);
}

void activation_fwd(const TensorView& act, const TensorView& pre, const MoeExpertsOptions& o) {
  if (o.activation == MoeExpertActivation::swiglu) return swiglu_fwd(act, pre);
  pointwise_activation_fwd(act, pre, o.pointwise);
}

void activation_bwd(const TensorView& dpre, const TensorView& dact, const TensorView& pre, const MoeExpertsOptions& o) {
  if (o.activation == MoeExpertActivation::swiglu) return swiglu_bwd(dpre, dact, pre);
  pointwise_activation_bwd(dpre, dact, pre, o.pointwise);
}

}  // namespace

void moe_grouped_mlp_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act,
                         const TensorView& inp, const int32_t* counts, const TensorView& weight1,
                         const TensorView& weight2, const MoeExpertsOptions& options) {
  const int64_t experts = weight1.dim(0), f1 = weight1.dim(1), hidden = weight1.dim(2), ffn = weight2.dim(2);
  const std::vector<int64_t> off = offsets_of(counts, experts);
  const std::vector<Tile> tiles = row_tiles(off, omp_get_max_threads());
  const int64_t n_tiles = static_cast<int64_t>(tiles.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n_tiles; ++i) {
    const Tile& t = tiles[i];
    const TensorView pre = pre_act.rows(t.begin, t.count), a = act.rows(t.begin, t.count);
    forward_gemm(pre.f32(), inp.f32() + t.begin * hidden, weight1.f32() + t.expert * f1 * hidden, t.count, f1, hidden);
    activation_fwd(a, pre, options);  // its own parallel-for runs on this thread (no nesting)
    forward_gemm(out.f32() + t.begin * hidden, a.f32(), weight2.f32() + t.expert * hidden * ffn, t.count, hidden, ffn);
  }
}

void moe_grouped_mlp_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                         const TensorView& dout, const TensorView& inp, const TensorView& pre_act, const int32_t* counts,
                         const TensorView& weight1, const TensorView& weight2, const TensorView& act,
                         const TensorView& dact, const TensorView& dpre_act, const MoeExpertsOptions& options) {
  const int64_t experts = weight1.dim(0), f1 = weight1.dim(1), hidden = weight1.dim(2), ffn = weight2.dim(2);
  const int threads = omp_get_max_threads();
  const std::vector<int64_t> off = offsets_of(counts, experts);
  const std::vector<Tile> tiles = row_tiles(off, threads);
  const std::vector<Tile> w2_tiles = weight_tiles(off, hidden, threads), w1_tiles = weight_tiles(off, f1, threads);
  const int64_t n_tiles = static_cast<int64_t>(tiles.size()), n_w2 = static_cast<int64_t>(w2_tiles.size()),
                n_w1 = static_cast<int64_t>(w1_tiles.size());
#pragma omp parallel
  {
    // Row tiles: recompute the activation, then dact = dout · W2 and dpre_act (zeroed first, as the
    // sequential loop zeroes before its accumulating ops), then dinp += dpre_act · W1.
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_tiles; ++i) {
      const Tile& t = tiles[i];
      const TensorView pre = pre_act.rows(t.begin, t.count), a = act.rows(t.begin, t.count);
      const TensorView da = dact.rows(t.begin, t.count), dp = dpre_act.rows(t.begin, t.count);
      activation_fwd(a, pre, options);
      std::memset(da.data, 0, da.bytes());
      input_grad_gemm(da.f32(), dout.f32() + t.begin * hidden, weight2.f32() + t.expert * hidden * ffn, t.count,
                      hidden, ffn);
      std::memset(dp.data, 0, dp.bytes());
      activation_bwd(dp, da, pre, options);
      if (!dinp.empty())
        input_grad_gemm(dinp.f32() + t.begin * hidden, dp.f32(), weight1.f32() + t.expert * f1 * hidden, t.count, f1,
                        hidden);
    }
    // Weight tiles (after the loop's barrier: every row's act and dpre_act are in place).
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t i = 0; i < n_w2; ++i) {
      const Tile& t = w2_tiles[i];
      const int64_t r0 = off[t.expert], n = off[t.expert + 1] - r0;
      weight_grad_gemm(dweight2.f32() + t.expert * hidden * ffn, dout.f32() + r0 * hidden, act.f32() + r0 * ffn, n,
                       hidden, ffn, t.begin, t.count);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_w1; ++i) {
      const Tile& t = w1_tiles[i];
      const int64_t r0 = off[t.expert], n = off[t.expert + 1] - r0;
      weight_grad_gemm(dweight1.f32() + t.expert * f1 * hidden, dpre_act.f32() + r0 * f1, inp.f32() + r0 * hidden, n,
                       f1, hidden, t.begin, t.count);
    }
  }
}

}  // namespace mt::cpu
