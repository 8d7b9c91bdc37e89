// CPU kernels for dropout and fused dropout-add.  Masks follow the rule in ops/dropout.h exactly:
// keep element i when rng.uniform(its DropoutRows index) >= p, drawn 16 Philox blocks at a time
// (backend/cpu/philox_simd.h); the dropout tests compare every mask bit against rng.uniform.
#include "backend/cpu/dropout.h"

#include "backend/cpu/philox_simd.h"
#include "backend/math/dropout_math.h"

#include <algorithm>
#include <cstring>

namespace mt::cpu {

namespace {

constexpr int64_t kChunk = 16384;  // elements per parallel work item in the flat form (fixed, so results never vary)

// out = residual + dropout(inp), residual optional, over n elements in rows of `width`; one pass
// per piece after its mask is drawn. With no x (and no y) only the mask is drawn. The pieces are
// kChunk elements of one flat range, or single rows when rows draw from separate ranges.
void dropout_impl(float* y, uint8_t* mask, const float* x, const float* res, int64_t n, int64_t width, float p,
                  const RngStream& rng, const DropoutRows& rows) {
  if (n == 0) return;
  const int64_t piece = rows.flat() ? kChunk : width;
  const int64_t pieces = (n + piece - 1) / piece;
  const float scale = p == 0.0f ? 1.0f : dropout_scale(p);
#pragma omp parallel for schedule(static)
  for (int64_t pc = 0; pc < pieces; ++pc) {
    const int64_t begin = pc * piece, end = std::min(n, begin + piece);
    if (p == 0.0f) {  // keep everything: skip the generator (uniform >= 0 always holds)
      std::memset(mask + begin, 1, static_cast<size_t>(end - begin));
      if (!x) continue;
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = res ? res[i] + x[i] : x[i];
      continue;
    }
    const uint64_t first = rows.row_start(begin / width, width) + static_cast<uint64_t>(begin % width);
    philox_keep<uint8_t>(rng, first, end - begin, p, 1, mask + begin);
    if (!x) continue;
    if (res) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = res[i] + dropout_apply(mask[i], x[i], scale);
    } else {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) y[i] = dropout_apply(mask[i], x[i], scale);
    }
  }
}

// DropoutRows views a tensor as rows of its last dimension.
int64_t width_of(const TensorView& t) { return t.ndim() > 0 && t.dim(-1) > 0 ? t.dim(-1) : 1; }

}  // namespace

void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 const DropoutRows& rows) {
  dropout_impl(out.f32(), mask.u8(), inp.f32(), nullptr, inp.numel(), width_of(inp), p, rng, rows);
}

void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, const DropoutRows& rows) {
  dropout_impl(out.f32(), mask.u8(), inp.f32(), residual.empty() ? nullptr : residual.f32(), inp.numel(),
               width_of(inp), p, rng, rows);
}

void dropout_mask(const TensorView& mask, float p, const RngStream& rng, const DropoutRows& rows) {
  dropout_impl(nullptr, mask.u8(), nullptr, nullptr, mask.numel(), width_of(mask), p, rng, rows);
}

void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p) {
  const int64_t n = dout.numel();
  const float scale = dropout_scale(p);
  const float* dy = dout.f32();
  const uint8_t* keep = mask.u8();
  float* dx = dinp.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] += dropout_apply(keep[i], dy[i], scale);
}

}  // namespace mt::cpu
