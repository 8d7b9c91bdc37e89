// AdamW with decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW / Megatron's Adam,
// fused with what Megatron's optimizer step does around it: the loss-scale unscale and the clipping
// coefficient applied to the gradient, and the copy into the 16-bit model parameters.
#pragma once

#include <cstdint>
#include <span>

#include "backend/adamw_args.h"  // AdamWParams (hyperparameters, g's factors), AdamWTensor
#include "tensor/tensor.h"

namespace mt {

// For each i (param, grad, m, v: f32, same numel), with g = fl(fl(grad · grad_unscale) · grad_clip)
// (AdamWParams, backend/adamw_args.h):
//   param  *= 1 − lr·wd
//   m       = β1·m + (1 − β1)·g;   v = β2·v + (1 − β2)·g²
//   param  −= lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps)
// model_copy (optional: bf16 or f16, same numel) receives the updated param rounded to nearest
// even, bit for bit what cast(model_copy, param) writes, in the same pass.
void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy = TensorView());

// Σ fl(grad[i] · unscale)² in double (grad f32): the sum of squares of the unscaled gradient
// without writing it back. Bit for bit sum_squares of the tensor after scale_inplace(grad, unscale)
// (same partition into chunks, same order), on every thread count.
double unscaled_sum_squares(const TensorView& grad, float unscale);

// Multi-tensor forms (as apex's multi_tensor_apply): every tensor of a model in one launch, one
// parallel region on CPU instead of one per tensor. On a machine shared with other processes every
// region's closing barrier can cost a scheduler time slice, so the count matters more than the
// bytes. Results are bit for bit those of the single-tensor calls.

// adamw_update(t.param, t.grad, t.m, t.v, params with weight_decay = t.weight_decay, t.model_copy)
// for every t (AdamWTensor: one tensor's share, backend/adamw_args.h); params.weight_decay is not
// used.
void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params);

// sums[k] = unscaled_sum_squares(grads[k], unscale) for every k. scratch: at least
// unscaled_sum_squares_multi_scratch(grads) doubles (workspace sized once by the caller).
int64_t unscaled_sum_squares_multi_scratch(std::span<const TensorView> grads);
void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double> scratch,
                                std::span<double> sums);

}  // namespace mt
