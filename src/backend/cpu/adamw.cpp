// CPU kernels for the optimizer step: the AdamW update as one fused pass over param, grad, m, v
// (and the 16-bit model copy), block by block, its arithmetic that of backend/math/adamw_math.h
// (shared with the CUDA kernel); the sum of squares of the unscaled gradient. The
// multi-tensor forms run every tensor in one parallel region, each thread taking a contiguous,
// equal share of all the blocks (chunks) end to end, so no thread waits between tensors.
#include "backend/cpu/adamw.h"
#include "backend/cpu/elementwise.h"
#include "backend/math/adamw_math.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace mt::cpu {

namespace {

constexpr int64_t kBlock = 256;  // elements per AdamW block

AdamWConsts adamw_consts(const AdamWParams& params, float weight_decay) {
  return mt::adamw_consts(params.lr, params.beta1, params.beta2, params.eps, params.step, params.grad_unscale,
                          params.grad_clip, weight_decay);
}

// Blocks [blk0, blk1) of one tensor. std::sqrt may set errno, which keeps GCC (without
// -fno-math-errno) from vectorising any loop that calls it, so the square roots get a short loop
// of their own and the arithmetic around them stays vectorised. The 16-bit copy of a block is
// written while the block is still in L1.
inline void adamw_blocks(const AdamWTensor& t, const AdamWConsts& k, int64_t blk0, int64_t blk1) {
  const int64_t n = t.param.numel();
  float* p = t.param.f32();
  const float* g = t.grad.f32();
  float* m1 = t.m.f32();
  float* m2 = t.v.f32();
  uint16_t* copy16 = t.model_copy.data != nullptr ? static_cast<uint16_t*>(t.model_copy.data) : nullptr;
  const bool copy_bf16 = copy16 != nullptr && t.model_copy.dtype == DType::bf16;
  const float b1 = k.b1, b2 = k.b2, eps = k.eps, unscale = k.unscale, clip = k.clip;
  const float step_size = k.step_size, inv_sqrt_bc2 = k.inv_sqrt_bc2, decay = k.decay;
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    const int64_t i0 = blk * kBlock, len = std::min(kBlock, n - i0);
    float* pb = p + i0;
    const float* gb = g + i0;
    float* mb = m1 + i0;
    float* vb = m2 + i0;
    float denom[kBlock];
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) adamw_moments(gb[i], mb[i], vb[i], b1, b2, unscale, clip);
    for (int64_t i = 0; i < len; ++i) denom[i] = std::sqrt(vb[i]);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) pb[i] = adamw_param(pb[i], mb[i], denom[i], decay, step_size, inv_sqrt_bc2, eps);
    if (copy_bf16) {
      uint16_t* cb = copy16 + i0;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) cb[i] = f32_to_bf16(pb[i]);
    } else if (copy16 != nullptr) {
      uint16_t* cb = copy16 + i0;
      for (int64_t i = 0; i < len; ++i) cb[i] = f32_to_f16(pb[i]);
    }
  }
}

int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

// Σ fl(x[i]·unscale)² over [begin, end), the simd reduction of cpu::sum_squares_range.
inline double unscaled_sum_squares_range(const float* x, float unscale, int64_t begin, int64_t end) {
  double acc = 0.0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = begin; i < end; ++i) {
    const float u = x[i] * unscale;
    acc += static_cast<double>(u) * u;
  }
  return acc;
}

// Inside a parallel region: the items of all tensors laid end to end (tensor k owns items_of(k)
// of them, `total` in all), split into one contiguous, equal share per thread. Calls
// body(k, first, begin, end) for each tensor k the calling thread's share touches: first is the
// global index of tensor k's first item, [begin, end) the share's part of tensor k in local indices.
template <class ItemsOf, class Body>
inline void for_thread_share(size_t tensors, int64_t total, ItemsOf items_of, Body body) {
  const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
  const int64_t lo = total * t / threads, hi = total * (t + 1) / threads;
  int64_t first = 0;
  for (size_t k = 0; k < tensors && first < hi; ++k) {
    const int64_t items = items_of(k);
    const int64_t begin = std::max(lo, first) - first, end = std::min(hi, first + items) - first;
    if (begin < end) body(k, first, begin, end);
    first += items;
  }
}

}  // namespace

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy) {
  const AdamWTensor t{param, grad, m, v, model_copy, params.weight_decay};
  const AdamWConsts k = adamw_consts(params, params.weight_decay);
  const int64_t blocks = blocks_of(param.numel());
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) adamw_blocks(t, k, blk, blk + 1);
}

void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params) {
  const auto blocks = [&](size_t k) { return blocks_of(tensors[k].param.numel()); };
  int64_t total = 0;
  for (size_t k = 0; k < tensors.size(); ++k) total += blocks(k);
#pragma omp parallel
  for_thread_share(tensors.size(), total, blocks, [&](size_t k, int64_t, int64_t b0, int64_t b1) {
    adamw_blocks(tensors[k], adamw_consts(params, tensors[k].weight_decay), b0, b1);
  });
}


double unscaled_sum_squares(const TensorView& grad, float unscale) {
  const int64_t n = grad.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = sum_squares_chunks(n), chunk = sum_squares_chunk_size(n, chunks);
  const float* x = grad.f32();
  double partial[kSumSquaresMaxChunks];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    partial[c] = unscaled_sum_squares_range(x, unscale, c * chunk, std::min(n, (c + 1) * chunk));
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double> scratch,
                                std::span<double> sums) {
  const auto chunks_of = [&](size_t k) { return sum_squares_chunks(grads[k].numel()); };
  int64_t total = 0;
  for (size_t k = 0; k < grads.size(); ++k) total += chunks_of(k);
  double* partial = scratch.data();
#pragma omp parallel
  for_thread_share(grads.size(), total, chunks_of, [&](size_t k, int64_t first, int64_t c0, int64_t c1) {
    const int64_t n = grads[k].numel(), chunk = sum_squares_chunk_size(n, chunks_of(k));
    for (int64_t c = c0; c < c1; ++c)
      partial[first + c] = unscaled_sum_squares_range(grads[k].f32(), unscale, c * chunk, std::min(n, (c + 1) * chunk));
  });
  // Each tensor's chunks folded in order, as the single-tensor form does.
  int64_t first = 0;
  for (size_t k = 0; k < grads.size(); ++k) {
    const int64_t chunks = sum_squares_chunks(grads[k].numel());
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[first + c];
    sums[k] = s;
    first += chunks;
  }
}

}  // namespace mt::cpu
