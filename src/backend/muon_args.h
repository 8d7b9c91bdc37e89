// Owns the argument types of the Muon kernels (MuonMomentumArgs, NewtonSchulzArgs), shared by
// ops/muon.h (the op contract, which documents them) and every backend's kernels.
#pragma once

#include <array>
#include <span>

namespace mt {

// The momentum step of Muon on one tensor (see muon_momentum in ops/muon.h).
struct MuonMomentumArgs {
  float beta = 0.9f;       // --muon-momentum
  bool nesterov = false;   // --muon-nesterov
  float grad_unscale = 1.0f;  // 1 / loss scale
  float grad_clip = 1.0f;     // Megatron's clip coefficient, 1 when not clipping
};

// One Newton–Schulz iteration X ← a·X + (b·A + c·A·A)·X with A = X·Xᵀ.
using NewtonSchulzStep = std::array<float, 3>;

struct NewtonSchulzArgs {
  std::span<const NewtonSchulzStep> steps;  // (a, b, c) of every iteration, in order
  // --muon-fp32-matmul-prec medium: the iteration's operands and results are bf16 (PyTorch's
  // bf16 matmuls, f32 accumulation, one rounding per product and epilogue); high: f32 throughout.
  bool bf16 = true;
  float eps = 1e-15f;  // the norm is clamped below at eps before X is divided by it
};

}  // namespace mt
