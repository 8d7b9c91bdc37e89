// CPU kernels for ops/adamw.h (shapes and hyperparameters already validated by the op).
#pragma once

#include "ops/adamw.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy);

double unscaled_sum_squares(const TensorView& grad, float unscale);

}  // namespace mt::cpu
