// Owns the argument types of the activation kernels (GeluForm), shared by ops/activation.h (the op
// contract) and every backend's kernels; they live here because backends sit below ops.
#pragma once

namespace mt {

// erf:  gelu(x) = x · Φ(x) = ½x(1 + erf(x/√2))           (torch.nn.functional.gelu)
// tanh: gelu(x) ≈ ½x(1 + tanh(√(2/π)(x + 0.044715x³)))   (GPT-2, Megatron's fused bias-GeLU)
enum class GeluForm { erf, tanh };

}  // namespace mt
