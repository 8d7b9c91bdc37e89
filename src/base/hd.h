// MT_HD marks the arithmetic that both backends run: plain inline functions in headers that the
// CPU kernels and the CUDA kernels include alike, so the CPU tests exercise what the GPU computes
// (DESIGN: "CUDA without a GPU").
#pragma once

#if defined(__CUDACC__)
#define MT_HD __host__ __device__
#else
#define MT_HD
#endif
