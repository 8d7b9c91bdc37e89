// CPU kernels for ops/dropout.h (shapes and p already validated by the op).
#pragma once

#include <cstdint>

#include "backend/dropout_args.h"
#include "base/rng.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 const DropoutRows& rows);
void dropout_mask(const TensorView& mask, float p, const RngStream& rng, const DropoutRows& rows);
void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p);
// residual may be empty (then this is dropout_fwd).
void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, const DropoutRows& rows);

}  // namespace mt::cpu
