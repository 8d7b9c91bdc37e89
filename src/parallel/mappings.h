// Owns Megatron's tensor-parallel mappings (megatron/core/tensor_parallel/mappings.py), each an
// explicit forward/backward pair over caller-provided buffers. "tp" mappings split or reduce the
// last (feature) dimension, "sp" ones split the first dimension (rows in [s, b] order, s split
// evenly), which is sequence parallelism. Backward functions overwrite their output gradient.
// The identity halves (copy_to_tp forward, reduce_from_tp backward) need no function.
#pragma once

#include "parallel/tensor_parallel.h"

namespace mt {

// copy_to_tp: identity forward; backward all-reduces the gradient (in place).
void copy_to_tp_bwd(const TensorParallel& tp, const TensorView& grad);
// reduce_from_tp: forward all-reduces (in place); identity backward.
void reduce_from_tp_fwd(const TensorParallel& tp, const TensorView& x);

// scatter_to_tp: out[N, C/t] = this rank's column block of in[N, C]; backward gathers the blocks.
void scatter_to_tp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in);
// din[N, C] = concat over ranks of dout[N, C/t]; scratch holds t·N·C/t floats.
void scatter_to_tp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout,
                       const TensorView& scratch);
// gather_from_tp: the reverse pair.
void gather_from_tp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in,
                        const TensorView& scratch);
void gather_from_tp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout);

// scatter_to_sp: out[N/t, ...] = this rank's rows of in[N, ...]; backward all-gathers the rows.
void scatter_to_sp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in);
void scatter_to_sp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout);
// gather_from_sp: out[N, ...] = all-gather of in[N/t, ...]; backward reduce-scatters.
void gather_from_sp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in);
void gather_from_sp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout);
// reduce_scatter_to_sp: out[N/t, ...] = this rank's rows of Σ_ranks in[N, ...]; backward all-gathers.
void reduce_scatter_to_sp_fwd(const TensorParallel& tp, const TensorView& out, const TensorView& in);
void reduce_scatter_to_sp_bwd(const TensorParallel& tp, const TensorView& din, const TensorView& dout);

}  // namespace mt
