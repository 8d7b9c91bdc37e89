// CPU kernel of moe_sinkhorn_fwd: the alternating scaling of backend/math/moe_sinkhorn_math.h, a
// pass over the rows (d0) and one over the columns (d1) per iteration, each an OpenMP team. d0 sits
// in column 0 of `scores` until the last pass overwrites each row with its scores, so the kernel
// needs no workspace (the CUDA kernel does the same).
#include <cmath>

#include "backend/cpu/moe_router.h"
#include "backend/math/moe_sinkhorn_math.h"

namespace mt::cpu {

void moe_sinkhorn_fwd(const TensorView& scores, const TensorView& logits) {
  const int64_t rows = logits.dim(0), experts = logits.dim(1);
  const float* x = logits.f32();
  float* out = scores.f32();
  if (rows == 0) return;
  float d1[kMoeMaxExperts], next[kMoeMaxExperts];
  for (int64_t e = 0; e < experts; ++e) d1[e] = 1.0f;
  for (int iters = 1;; ++iters) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows; ++t) out[t * experts] = moe_sinkhorn_row_scale(x + t * experts, d1, experts, rows);
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < experts; ++e) next[e] = moe_sinkhorn_col_scale(x, out, experts, e, experts, rows);
    double change = 0.0;
    for (int64_t e = 0; e < experts; ++e) {
      change += std::fabs(static_cast<double>(next[e]) - d1[e]);
      d1[e] = next[e];
    }
    if (!moe_sinkhorn_again(change, experts, iters)) break;
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const float d0 = out[t * experts];
    for (int64_t e = 0; e < experts; ++e) out[t * experts + e] = moe_sinkhorn_score(x[t * experts + e], d0, d1[e]);
  }
}

}  // namespace mt::cpu
