// Dropout with masks drawn from the counter-based generator (DESIGN invariant 2): each element uses
// rng.uniform at the index DropoutRows gives it (backend/dropout_args.h): in the model, one keyed by
// the global sample, the position and the element, so that neither the micro-batch grouping nor the
// tensor or sequence split changes a mask; a plain offset is the flat form, offset + i.
#pragma once

#include <cstdint>

#include "backend/dropout_args.h"
#include "base/rng.h"
#include "tensor/tensor.h"

namespace mt {

// keep = rng.uniform(index of element i under `rows`) >= p;  mask[i] = keep (u8, 1 byte per element, saved);
// out[i] = keep ? inp[i] / (1 − p) : 0.  With p == 0, out = inp and the mask is all ones.
// Every op here also takes an empty mask with p == 0 (a layer built without dropout keeps none):
// the same results, no mask written or read.
void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 const DropoutRows& rows);
// The mask of dropout_fwd alone (no data pass): for recomputation, where only the mask is needed.
void dropout_mask(const TensorView& mask, float p, const RngStream& rng, const DropoutRows& rows);
// dinp[i] += mask[i] ? dout[i] / (1 − p) : 0.
void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p);

// Fused bias-dropout-add (Megatron's residual path): out = residual + dropout(inp), same mask rule.
// Its backward is dropout_bwd for inp plus dresidual += dout.
void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, const DropoutRows& rows);

}  // namespace mt
