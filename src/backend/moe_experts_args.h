// Owns the argument types of the MoE expert kernels (MoeExpertsOptions), shared by ops/moe_experts.h
// (the op contracts) and every backend's kernels; they live here because backends sit below ops.
#pragma once

#include <cstdint>

#include "backend/activation_args.h"  // PointwiseActivation

namespace mt {

// The experts' activation, as the dense MLP has it: a pointwise one (GeLU, squared ReLU) on fc1's
// output [n, ffn], or SwiGLU on
// fc1's output [n, 2·ffn] = [gate | up] (Megatron's --swiglu, chunk(2) on the last dim).
enum class MoeExpertActivation : uint8_t { pointwise, swiglu };

// sequential: one linear/activation/linear op call per expert (Megatron's SequentialMLP, the
// reference); grouped: one backend call over every expert's rows (Megatron's GroupedMLP,
// --moe-grouped-gemm).
enum class MoeExpertsImpl : uint8_t { sequential, grouped };

struct MoeExpertsOptions {
  MoeExpertActivation activation = MoeExpertActivation::pointwise;
  PointwiseActivation pointwise = PointwiseActivation::gelu;  // pointwise only
  MoeExpertsImpl impl = MoeExpertsImpl::grouped;
};

}  // namespace mt
