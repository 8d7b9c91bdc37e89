// CUDA entry points of ops/dropout.h: views and the RngStream to pointers and Philox keys, then the
// kernels of dropout.cu.  The op has already handled the mask-less (p == 0, empty mask) forms.
#include "backend/cuda/kernels/dropout.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {
// DropoutRows views a tensor as rows of its last dimension.
int64_t width_of(const TensorView& t) { return t.ndim() > 0 && t.dim(-1) > 0 ? t.dim(-1) : 1; }
}  // namespace

void dropout_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp, float p, const RngStream& rng,
                 const DropoutRows& rows) {
  if (inp.numel() == 0) return;
  k::dropout_fwd(out.f32(), mask.u8(), inp.f32(), nullptr, inp.numel(), width_of(inp), p, rng.seed, rng.stream, rows,
                 stream());
  check_launch("dropout_fwd");
}

void dropout_mask(const TensorView& mask, float p, const RngStream& rng, const DropoutRows& rows) {
  if (mask.numel() == 0) return;
  k::dropout_fwd(nullptr, mask.u8(), nullptr, nullptr, mask.numel(), width_of(mask), p, rng.seed, rng.stream, rows,
                 stream());
  check_launch("dropout_mask");
}

void dropout_bwd(const TensorView& dinp, const TensorView& dout, const TensorView& mask, float p) {
  if (dout.numel() == 0) return;
  k::dropout_bwd(dinp.f32(), dout.f32(), mask.u8(), dout.numel(), p, stream());
  check_launch("dropout_bwd");
}

void dropout_add_fwd(const TensorView& out, const TensorView& mask, const TensorView& inp,
                     const TensorView& residual, float p, const RngStream& rng, const DropoutRows& rows) {
  if (inp.numel() == 0) return;
  k::dropout_fwd(out.f32(), mask.u8(), inp.f32(), residual.empty() ? nullptr : residual.f32(), inp.numel(),
                 width_of(inp), p, rng.seed, rng.stream, rows, stream());
  check_launch("dropout_add_fwd");
}

}  // namespace mt::cuda
