// Owns the argument types of the activation kernels (PointwiseActivation), shared by ops/activation.h
// (the op contract) and every backend's kernels; they live here because backends sit below ops.
#pragma once

namespace mt {

// The activations that act on one element at a time:
// gelu:         x · Φ(x) = ½x(1 + erf(x/√2))             (torch.nn.functional.gelu, Megatron's default)
// gelu_tanh:    ½x(1 + tanh(√(2/π)(x + 0.044715x³)))     (GPT-2, --openai-gelu)
// squared_relu: max(x, 0)²                               (Primer, --squared-relu)
enum class PointwiseActivation { gelu, gelu_tanh, squared_relu };

}  // namespace mt
