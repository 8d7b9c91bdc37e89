#include "model/blocks/norm_act.h"

#include "ops/activation.h"
#include "ops/norm.h"

namespace mt {

void norm_fwd(const ModelConfig& c, const TensorView& out, const TensorView& mean, const TensorView& rstd,
              const TensorView& inp, const TensorView& weight, const TensorView& bias) {
  if (c.normalization == Normalization::layernorm)
    layernorm_fwd(out, mean, rstd, inp, weight, bias, c.norm_epsilon);
  else
    rmsnorm_fwd(out, rstd, inp, weight, c.norm_epsilon);
}

void norm_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dweight, const TensorView& dbias,
              const TensorView& dout, const TensorView& inp, const TensorView& weight, const TensorView& mean,
              const TensorView& rstd) {
  if (c.normalization == Normalization::layernorm)
    layernorm_bwd(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  else
    rmsnorm_bwd(dinp, dweight, dout, inp, weight, rstd);
}

void mlp_activation_fwd(const ModelConfig& c, const TensorView& out, const TensorView& inp) {
  switch (c.activation) {
    case Activation::gelu: return gelu_fwd(out, inp, GeluForm::erf);
    case Activation::gelu_tanh: return gelu_fwd(out, inp, GeluForm::tanh);
    case Activation::swiglu: return swiglu_fwd(out, inp);
  }
}

void mlp_activation_bwd(const ModelConfig& c, const TensorView& dinp, const TensorView& dout, const TensorView& inp) {
  switch (c.activation) {
    case Activation::gelu: return gelu_bwd(dinp, dout, inp, GeluForm::erf);
    case Activation::gelu_tanh: return gelu_bwd(dinp, dout, inp, GeluForm::tanh);
    case Activation::swiglu: return swiglu_bwd(dinp, dout, inp);
  }
}

}  // namespace mt
