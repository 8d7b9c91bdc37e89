// CPU kernels for ops/adamw.h (shapes and hyperparameters already validated by the op).
#pragma once

#include <span>

#include "backend/adamw_args.h"
#include "tensor/tensor.h"

namespace mt::cpu {

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy);
void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params);

double unscaled_sum_squares(const TensorView& grad, float unscale);
// How many chunks the sum of squares of n elements is split into (the partition of
// cpu::sum_squares, which fixes the summation order).
int64_t sum_squares_chunks(int64_t n);
void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double> scratch,
                                std::span<double> sums);

}  // namespace mt::cpu
