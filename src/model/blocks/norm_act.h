// Config-selected norm (LayerNorm | RMSNorm) and MLP activation (GeLU | GeLU-tanh | SwiGLU),
// so layers and the output head call one function whatever the architecture.
#pragma once

#include "backend/arena.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace mt {

// One norm's weights (this rank's copy, held whole): [width]; bias empty for RMSNorm.
struct NormWeights {
  TensorView weight, bias;
};

// What a norm's backward reads besides its input: f32, one value per normalised row.
struct NormStats {
  TensorView mean;  // [rows] (LayerNorm only)
  TensorView rstd;  // [rows]
};

NormStats alloc_norm_stats(Arena& arena, const ModelConfig& c, int64_t rows);

// mean is unused (may be empty) for RMSNorm; bias is empty when the config has none.
void norm_fwd(const ModelConfig& c, const TensorView& out, const TensorView& mean, const TensorView& rstd,
              const TensorView& inp, const TensorView& weight, const TensorView& bias);
void norm_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
              const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
              const TensorView& rstd);
// The same over NormWeights / NormStats (rows: inp's elements / width; dinp and g accumulate).
void norm_fwd(const ModelConfig& c, const TensorView& out, const NormStats& stats, const TensorView& inp,
              const NormWeights& w);
void norm_bwd(const ModelConfig& c, const TensorView& dinp, const NormWeights& g, const TensorView& dout,
              const TensorView& inp, const NormWeights& w, const NormStats& stats);

void mlp_activation_fwd(const ModelConfig& c, const TensorView& out, const TensorView& inp);
void mlp_activation_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dout, const TensorView& inp);

}  // namespace mt
