// Owns the arithmetic of Sinkhorn load balancing (Megatron's moe_utils.py::sinkhorn), which both
// backends run (DESIGN: "CUDA without a GPU"). With c = exp(logits) [T, E] and d1 = 1, repeat
//   d0_t = (1/T) / (Σ_e d1_e·c_te + eps),   d1_e = (1/E) / (Σ_t d0_t·c_te + eps)     (eps = 1e-8)
// until mean_e |Δd1| ≤ 1e-4, then scores_te = d0_t·c_te·d1_e. d0 and d1 are f32 as Megatron's
// are; each sum runs in double in index order, the same order on both backends.
#pragma once

#include <math.h>

#include <cstdint>

#include "base/hd.h"

namespace mt {

inline constexpr double kMoeSinkhornEps = 1e-8;
inline constexpr double kMoeSinkhornTol = 1e-4;
// Megatron iterates without bound; a cost matrix that never balances stops here instead of hanging
// (positive matrices converge in tens of iterations).
inline constexpr int kMoeSinkhornMaxIters = 10000;

// d0_t of one row x [E] given d1 [E].
MT_HD inline float moe_sinkhorn_row_scale(const float* x, const float* d1, int64_t experts, int64_t tokens) {
  double sum = 0.0;
  for (int64_t e = 0; e < experts; ++e) sum += static_cast<double>(d1[e]) * exp(static_cast<double>(x[e]));
  return static_cast<float>(1.0 / static_cast<double>(tokens) / (sum + kMoeSinkhornEps));
}

// d1_e of column e of x [T, E] given d0_t at d0[t · d0_stride].
MT_HD inline float moe_sinkhorn_col_scale(const float* x, const float* d0, int64_t d0_stride, int64_t e,
                                          int64_t experts, int64_t tokens) {
  double sum = 0.0;
  for (int64_t t = 0; t < tokens; ++t)
    sum += static_cast<double>(d0[t * d0_stride]) * exp(static_cast<double>(x[t * experts + e]));
  return static_cast<float>(1.0 / static_cast<double>(experts) / (sum + kMoeSinkhornEps));
}

// Whether another iteration follows the `iters`-th, whose d1 moved by Σ_e |Δd1_e| = change
// (a NaN change stops, as Megatron's `while error > tol` does).
MT_HD inline bool moe_sinkhorn_again(double change, int64_t experts, int iters) {
  return change / static_cast<double>(experts) > kMoeSinkhornTol && iters < kMoeSinkhornMaxIters;
}

MT_HD inline float moe_sinkhorn_score(float x, float d0, float d1) {
  return static_cast<float>(static_cast<double>(d1) * exp(static_cast<double>(x)) * static_cast<double>(d0));
}

}  // namespace mt
