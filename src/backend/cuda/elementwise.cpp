// CUDA entry points of ops/elementwise.h: views to pointers, then the kernels of elementwise.cu.
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {
int code(DType t) { return static_cast<int>(t); }  // the kernels' dtype codes are DType's
static_assert(static_cast<int>(DType::f32) == 0 && static_cast<int>(DType::bf16) == 1 &&
              static_cast<int>(DType::f16) == 2);
}  // namespace

void add_fwd(const TensorView& out, const TensorView& a, const TensorView& b) {
  k::add(out.f32(), a.f32(), b.f32(), out.numel(), stream());
  check_launch("add_fwd");
}

void accumulate(const TensorView& dst, const TensorView& src) {
  k::accumulate(dst.f32(), src.f32(), dst.numel(), stream());
  check_launch("accumulate");
}

void bias_add(const TensorView& t, const TensorView& bias) {
  k::bias_add(t.f32(), bias.f32(), t.dim(0), t.dim(1), stream());
  check_launch("bias_add");
}

void scale_inplace(const TensorView& t, float factor) {
  k::scale(t.f32(), factor, t.numel(), stream());
  check_launch("scale_inplace");
}

void copy_tensor(const TensorView& dst, const TensorView& src) {
  memmove_async(dst.data, src.data, src.bytes());
}

void copy_row_block(const TensorView& dst, int64_t dst_row, const TensorView& src, int64_t src_row, int64_t rows) {
  const size_t row_bytes = static_cast<size_t>(dst.dim(2)) * dtype_size(dst.dtype);
  MT_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(dst.data) + dst_row * row_bytes, dst.dim(1) * row_bytes,
                                  static_cast<const uint8_t*>(src.data) + src_row * row_bytes, src.dim(1) * row_bytes,
                                  rows * row_bytes, dst.dim(0), cudaMemcpyDeviceToDevice, stream()));
}

void cast(const TensorView& dst, const TensorView& src) {
  if (dst.dtype == src.dtype) return copy_tensor(dst, src);
  k::cast(dst.data, code(dst.dtype), src.data, code(src.dtype), src.numel(), stream());
  check_launch("cast");
}

void round_to_dtype(const TensorView& t, DType dtype) {
  k::round_to(t.f32(), code(dtype), t.numel(), stream());
  check_launch("round_to_dtype");
}

double sum_squares(const TensorView& t) {
  if (t.numel() == 0) return 0.0;
  double* partial = reduction_scratch();
  k::sum_squares(partial, t.data, code(t.dtype), 1.0f, t.numel(), stream());
  check_launch("sum_squares");
  double total = 0.0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&total, partial, sizeof total, cudaMemcpyDeviceToHost, stream()));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return total;
}

}  // namespace mt::cuda
