// CUDA entry points of ops/norm.h: views to pointers, then the kernels of norm.cu.
#include "backend/cuda/kernels/norm.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {
// Rows of length h = the last dim, as the CPU kernels read them (h = 0: nothing to do).
int64_t rows_of(const TensorView& t, int64_t h) { return h ? t.numel() / h : 0; }
}  // namespace

void layernorm_fwd(const TensorView& out, const TensorView& mean, const TensorView& rstd, const TensorView& inp,
                   const TensorView& weight, const TensorView& bias, float eps, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = rows_of(inp, h);
  if (rows == 0) return;
  k::layernorm_fwd(out.f32(), mean.f32(), rstd.f32(), inp.f32(), weight.f32(), bias.empty() ? nullptr : bias.f32(),
                   rows, h, eps, weight_offset, stream());
  check_launch("layernorm_fwd");
}

void layernorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
                   const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
                   const TensorView& rstd, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = rows_of(inp, h);
  if (rows == 0) return;
  k::norm_bwd_params(dweight.f32(), dbias.empty() ? nullptr : dbias.f32(), dout.f32(), inp.f32(), mean.f32(),
                     rstd.f32(), rows, h, stream());
  check_launch("layernorm_bwd (weight and bias)");
  k::norm_bwd_input(dinp.f32(), dout.f32(), inp.f32(), weight.f32(), weight_offset, mean.f32(), rstd.f32(), rows, h,
                    stream());
  check_launch("layernorm_bwd (input)");
}

void rmsnorm_fwd(const TensorView& out, const TensorView& rstd, const TensorView& inp, const TensorView& weight,
                 float eps, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = rows_of(inp, h);
  if (rows == 0) return;
  k::rmsnorm_fwd(out.f32(), rstd.f32(), inp.f32(), weight.f32(), rows, h, eps, weight_offset, stream());
  check_launch("rmsnorm_fwd");
}

void rmsnorm_bwd(const TensorView& dinp, const TensorView& dweight, const TensorView& dout, const TensorView& inp,
                 const TensorView& weight, const TensorView& rstd, float weight_offset) {
  const int64_t h = inp.dim(-1), rows = rows_of(inp, h);
  if (rows == 0) return;
  k::norm_bwd_params(dweight.f32(), nullptr, dout.f32(), inp.f32(), nullptr, rstd.f32(), rows, h, stream());
  check_launch("rmsnorm_bwd (weight)");
  k::norm_bwd_input(dinp.f32(), dout.f32(), inp.f32(), weight.f32(), weight_offset, nullptr, rstd.f32(), rows, h,
                    stream());
  check_launch("rmsnorm_bwd (input)");
}

}  // namespace mt::cuda
