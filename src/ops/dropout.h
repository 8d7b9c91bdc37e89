// Dropout with masks drawn from the counter-based generator (DESIGN invariant 2): element i of a
// tensor uses rng.uniform(offset + i), so a shard that passes the global offset of its first
// element draws the same mask as the unsharded tensor.
#pragma once

#include <cstdint>

#include "base/rng.h"
#include "tensor/tensor.h"

namespace mt {

// keep = rng.uniform(offset + i) >= p;  mask[i] = keep (u8, 1 byte per element, saved);
// out[i] = keep ? inp[i] / (1 − p) : 0.  With p == 0, out = inp and the mask is all ones.
// Every op here also takes an empty mask with p == 0 (a layer built without dropout keeps none):
// the same results, no mask written or read.
void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 uint64_t offset);
// The mask of dropout_fwd alone (no data pass): for recomputation, where only the mask is needed.
void dropout_mask(const TensorView& mask, float p, const RngStream& rng, uint64_t offset);
// dinp[i] += mask[i] ? dout[i] / (1 − p) : 0.
void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p);

// Fused bias-dropout-add (Megatron's residual path): out = residual + dropout(inp), same mask rule.
// Its backward is dropout_bwd for inp plus dresidual += dout.
void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, uint64_t offset);

}  // namespace mt
