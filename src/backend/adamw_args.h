// Owns the argument types of the AdamW kernels (AdamWParams, AdamWTensor), shared by ops/adamw.h
// (the op contract, which documents the update) and every backend's kernels; they live here because
// backends sit below ops.
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
  // The gradient the update uses is g = fl(fl(grad · grad_unscale) · grad_clip): each factor
  // rounded to f32 in turn, exactly as a scale_inplace pass by 1/loss_scale and then one by the
  // clip coefficient would leave it. A factor of 1 leaves the bits unchanged. `grad` itself is
  // only read.
  float grad_unscale = 1.0f;  // 1 / loss scale
  float grad_clip = 1.0f;     // Megatron's clip coefficient, 1 when not clipping
};

// One tensor's share of a multi-tensor AdamW step.
struct AdamWTensor {
  TensorView param, grad, m, v;  // f32, same numel
  TensorView model_copy;         // optional bf16/f16 copy of param (see adamw_update)
  float weight_decay = 0.0f;     // this tensor's decay (0 for biases and norms)
};

}  // namespace mt
