// CPU kernels for ops/muon.h (shapes and arguments already validated by the op).
#pragma once

#include "backend/muon_args.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void muon_momentum(const TensorView& m, const TensorView& update, const TensorView& grad, const MuonMomentumArgs& args);
void muon_apply(const TensorView& param, const TensorView& update, float lr, float weight_decay,
                const TensorView& model_copy);
void newton_schulz(const TensorView& x, const NewtonSchulzArgs& args, const TensorView& workspace);

}  // namespace mt::cpu
