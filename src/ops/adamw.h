// AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW / Megatron's Adam.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mt {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // pass 0 for params excluded from decay (biases, norms)
  int64_t step = 1;           // 1-based, for the bias corrections
};

// For each i (all f32, same numel):
//   param  *= 1 − lr·wd
//   m       = β1·m + (1 − β1)·g;   v = β2·v + (1 − β2)·g²
//   param  −= lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps)
void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params);

}  // namespace mt
