// CPU kernels for ops/cross_entropy.h (shapes already validated by the op; labels checked here).
#pragma once

#include "tensor/tensor.h"

namespace mt::cpu {

void cross_entropy_fwd(const TensorView& losses, const TensorView& lse, const TensorView& logits,
                       const TensorView& labels);
// dlogits may be the same memory as logits.
void cross_entropy_bwd(const TensorView& dlogits, const TensorView& dlosses, const TensorView& logits,
                       const TensorView& lse, const TensorView& labels);

}  // namespace mt::cpu
