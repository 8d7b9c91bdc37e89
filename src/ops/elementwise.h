// Small elementwise and reduction ops on flat tensors (any shape, same numel).
#pragma once

#include "tensor/tensor.h"

namespace mt {

void add_fwd(const TensorView& out, const TensorView& a, const TensorView& b);  // out = a + b
void accumulate(const TensorView& dst, const TensorView& src);                   // dst += src
// t[n, o] += bias[o] for t [N, O] (a row-parallel linear adds its bias after the reduction).
void bias_add(const TensorView& t, const TensorView& bias);
void scale_inplace(const TensorView& t, float factor);                           // t *= factor
void copy_tensor(const TensorView& dst, const TensorView& src);                  // same dtype
// dst[o, dst_row + i, :] = src[o, src_row + i, :] for o < outer, i < rows, with dst [outer, Rd,
// inner] and src [outer, Rs, inner] of one dtype: a block of rows of every outer slice (context
// parallelism moves sequence chunks and head blocks with it).
void copy_row_block(const TensorView& dst, int64_t dst_row, const TensorView& src, int64_t src_row, int64_t rows);
// dst = src converted between f32, bf16 and f16 (16-bit rounding: nearest even).
void cast(const TensorView& dst, const TensorView& src);
// t (f32) rounded in place to the nearest value of `dtype` (bf16 / f16: nearest even; f32: no-op).
// This is how a 16-bit tensor's numerics are reproduced while computing in f32.
void round_to_dtype(const TensorView& t, DType dtype);
// Σ t[i]² in double (for the global gradient norm).
double sum_squares(const TensorView& t);

}  // namespace mt
