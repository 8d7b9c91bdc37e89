// CPU kernels for ops/elementwise.h: flat adds, scales, copies, dtype casts and the sum of squares.
#include "backend/cpu/elementwise.h"

#include <cstring>

namespace mt::cpu {

namespace {

// Reads element i of a float-like tensor as f32 (bf16 and f16 widen exactly).
inline float load_as_f32(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: return static_cast<const float*>(t.data)[i];
  }
}

// Sum of squares of [begin, end) in double.  The simd reduction's order is fixed at compile time,
// so the result does not depend on the thread count.
double sum_squares_range(const TensorView& t, int64_t begin, int64_t end) {
  double acc = 0.0;
  if (t.dtype == DType::f32) {
    const float* x = static_cast<const float*>(t.data);
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * x[i];
  } else if (t.dtype == DType::bf16) {
    const uint16_t* x = static_cast<const uint16_t*>(t.data);
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) {
      const double v = bf16_to_f32(x[i]);
      acc += v * v;
    }
  } else {
    for (int64_t i = begin; i < end; ++i) {
      const double v = load_as_f32(t, i);
      acc += v * v;
    }
  }
  return acc;
}

}  // namespace

void add_fwd(const TensorView& out, const TensorView& a, const TensorView& b) {
  const int64_t n = out.numel();
  float* y = out.f32();
  const float* x0 = a.f32();
  const float* x1 = b.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = x0[i] + x1[i];
}

void accumulate(const TensorView& dst, const TensorView& src) {
  const int64_t n = dst.numel();
  float* y = dst.f32();
  const float* x = src.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void bias_add(const TensorView& t, const TensorView& bias) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  float* y_all = t.f32();
  const float* b = bias.f32();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* y = y_all + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[c] += b[c];
  }
}

void scale_inplace(const TensorView& t, float factor) {
  const int64_t n = t.numel();
  float* y = t.f32();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] *= factor;
}

void copy_tensor(const TensorView& dst, const TensorView& src) {
  if (dst.data != src.data) std::memmove(dst.data, src.data, src.bytes());
}

void copy_row_block(const TensorView& dst, int64_t dst_row, const TensorView& src, int64_t src_row, int64_t rows) {
  const size_t row_bytes = static_cast<size_t>(dst.dim(2)) * dtype_size(dst.dtype);
  const auto* from = static_cast<const uint8_t*>(src.data);
  auto* to = static_cast<uint8_t*>(dst.data);
  for (int64_t o = 0; o < dst.dim(0); ++o)
    std::memcpy(to + (o * dst.dim(1) + dst_row) * row_bytes, from + (o * src.dim(1) + src_row) * row_bytes,
                rows * row_bytes);
}

void cast(const TensorView& dst, const TensorView& src) {
  if (dst.dtype == src.dtype) return copy_tensor(dst, src);
  const int64_t n = src.numel();
  // The common f32 <-> bf16 pairs get branch-free loops of their own; the rest go through f32,
  // which holds every bf16 and f16 value exactly, so each path rounds once.
  if (src.dtype == DType::f32 && dst.dtype == DType::bf16) {
    const float* x = src.f32();
    uint16_t* y = dst.bf16();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
  } else if (src.dtype == DType::bf16 && dst.dtype == DType::f32) {
    const uint16_t* x = src.bf16();
    float* y = dst.f32();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
  } else if (dst.dtype == DType::f32) {
    float* y = dst.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = load_as_f32(src, i);
  } else if (dst.dtype == DType::bf16) {
    uint16_t* y = dst.bf16();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(load_as_f32(src, i));
  } else {
    uint16_t* y = dst.f16();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(load_as_f32(src, i));
  }
}

void round_to_dtype(const TensorView& t, DType dtype) {
  float* x = t.f32();
  const int64_t n = t.numel();
  if (dtype == DType::bf16) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
  }
}

int64_t sum_squares_chunks(int64_t n) {
  constexpr int64_t kMinChunk = 16384;
  return n == 0 ? 0 : std::min(kSumSquaresMaxChunks, (n + kMinChunk - 1) / kMinChunk);
}

double sum_squares(const TensorView& t) {
  // The same bits on every run and every OMP_NUM_THREADS (see sum_squares_chunks).
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = sum_squares_chunks(n), chunk = sum_squares_chunk_size(n, chunks);
  double partial[kSumSquaresMaxChunks];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    partial[c] = sum_squares_range(t, c * chunk, std::min(n, (c + 1) * chunk));
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace mt::cpu
