// Owns the per-element arithmetic of dropout (host/device, base/hd.h): the keep rule on Philox's
// 24 bits (base/philox.h) and the scaling of a kept element, which the CPU kernels
// (backend/cpu/dropout.cpp) and the CUDA kernels (backend/cuda/kernels/dropout.cu) share.
#pragma once

#include <cstdint>

#include "base/hd.h"
#include "base/philox.h"

namespace mt {

// 1/(1 − p), the scale of a kept element, in f32 as both backends compute it.
MT_HD inline float dropout_scale(float p) { return 1.0f / (1.0f - p); }

// Element i keeps when its uniform, bits·2^−24, reaches p: bits >= dropout_threshold(p).
MT_HD inline bool dropout_keeps(uint32_t bits24, uint32_t threshold) { return bits24 >= threshold; }

// A kept element scaled, a dropped one 0.  On the device the product is rounded on its own
// (__fmul_rn is never fused into a following add), as in the CPU's vectorised loops; GCC may still
// fuse it into `residual +` or `dx +=` in a loop's scalar remainder, so values agree to an ulp of
// the product, masks exactly.
MT_HD inline float dropout_apply(bool keep, float x, float scale) {
#if defined(__CUDA_ARCH__)
  return keep ? __fmul_rn(x, scale) : 0.0f;
#else
  return keep ? x * scale : 0.0f;
#endif
}

}  // namespace mt
