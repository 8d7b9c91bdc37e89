// Muon (Jordan et al.; Megatron's TensorParallelMuon over the emerging_optimizers package): the
// momentum of a matrix parameter is orthogonalised by a Newton–Schulz iteration before the step.
// These are its per-tensor pieces; optim/muon.h puts them together over the parallel groups.
#pragma once

#include <cstdint>

#include "backend/muon_args.h"  // MuonMomentumArgs, NewtonSchulzArgs
#include "tensor/tensor.h"

namespace mt {

// For each i (m, update, grad: f32, same numel), with g = fl(fl(grad · grad_unscale) · grad_clip):
//   m      = lerp(m, g, 1 − β)                      (m ← β·m + (1 − β)·g in torch's lerp)
//   update = nesterov ? lerp(g, m, β) : m
void muon_momentum(const TensorView& m, const TensorView& update, const TensorView& grad, const MuonMomentumArgs& args);

// param = param·(1 − lr·weight_decay) − lr·update (decoupled decay, then the step); model_copy
// (optional: bf16 or f16, same numel) receives the result rounded to nearest even.
void muon_apply(const TensorView& param, const TensorView& update, float lr, float weight_decay,
                const TensorView& model_copy = TensorView());

// x [r, c] (f32) ← the Newton–Schulz approximation of its orthogonal polar factor U·Vᵀ
// (x = U·S·Vᵀ): X = x/max(‖x‖_F, eps), transposed to [min, max] when r > c, then for every
// (a, b, c) of args.steps X ← a·X + (b·A + c·A·A)·X with A = X·Xᵀ, transposed back. Under
// args.bf16 X enters the loop rounded to bf16 and A, b·A + c·A·A and the new X are each rounded
// to bf16 as they are made. workspace: newton_schulz_workspace(r, c) f32 elements.
int64_t newton_schulz_workspace(int64_t rows, int64_t cols);
void newton_schulz(const TensorView& x, const NewtonSchulzArgs& args, const TensorView& workspace);

}  // namespace mt
