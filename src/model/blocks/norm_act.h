// Config-selected norm (LayerNorm | RMSNorm) and MLP activation (GeLU | GeLU-tanh | SwiGLU),
// so layers and the output head call one function whatever the architecture.
#pragma once

#include "model/config.h"
#include "tensor/tensor.h"

namespace mt {

// mean is unused (may be empty) for RMSNorm; bias is empty when the config has none.
void norm_fwd(const ModelConfig& c, const TensorView& out, const TensorView& mean, const TensorView& rstd,
              const TensorView& inp, const TensorView& weight, const TensorView& bias);
void norm_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
              const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
              const TensorView& rstd);

void mlp_activation_fwd(const ModelConfig& c, const TensorView& out, const TensorView& inp);
void mlp_activation_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dout, const TensorView& inp);

}  // namespace mt
