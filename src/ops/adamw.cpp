// Validates the AdamW step and the unscaled sum of squares once for every backend, then routes to
// the backend owning the memory.
#include "ops/adamw.h"
#include "ops/dispatch.h"

#include <cmath>

#include "backend/cpu/adamw.h"

namespace mt {

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy) {
  const char* op = "adamw_update";
  const int64_t n = param.numel();
  const TensorView* tensors[] = {&param, &grad, &m, &v};
  const char* names[] = {"param", "grad", "m", "v"};
  for (int k = 0; k < 4; ++k) {
    check_dtype(*tensors[k], DType::f32, op, names[k]);
    MT_CHECK(tensors[k]->numel() == n) << op << ": " << names[k] << " is " << tensors[k]->str() << ", expected "
                                       << n << " elements like param";
    MT_CHECK(!tensors[k]->empty() || n == 0) << op << ": " << names[k] << " has no data";
  }
  const bool has_copy = model_copy.data != nullptr;
  if (has_copy) {
    MT_CHECK(model_copy.dtype == DType::bf16 || model_copy.dtype == DType::f16)
        << op << ": model_copy is " << model_copy.str() << ", expected bf16 or f16 (an f32 param is updated in place)";
    MT_CHECK(model_copy.numel() == n) << op << ": model_copy is " << model_copy.str() << ", expected " << n
                                      << " elements like param";
    MT_CHECK(model_copy.data != param.data) << op << ": model_copy must not alias param";
  }
  MT_CHECK(params.step >= 1) << op << ": step " << params.step << " must be >= 1 (1-based, for the bias corrections)";
  MT_CHECK(params.beta1 >= 0.0f && params.beta1 < 1.0f && params.beta2 >= 0.0f && params.beta2 < 1.0f)
      << op << ": betas (" << params.beta1 << ", " << params.beta2 << ") must lie in [0, 1)";
  MT_CHECK(std::isfinite(params.lr) && std::isfinite(params.eps) && std::isfinite(params.weight_decay))
      << op << ": lr " << params.lr << ", eps " << params.eps << ", weight_decay " << params.weight_decay
      << " must be finite";
  MT_CHECK(std::isfinite(params.grad_unscale) && std::isfinite(params.grad_clip))
      << op << ": grad_unscale " << params.grad_unscale << " and grad_clip " << params.grad_clip << " must be finite";
  if (has_copy) check_same_device({param, grad, m, v, model_copy}, op);
  else check_same_device({param, grad, m, v}, op);
  switch (param.device) {
    case Device::cpu: return cpu::adamw_update(param, grad, m, v, params, model_copy);
    case Device::cuda: break;
  }
  no_kernel(op);
}

double unscaled_sum_squares(const TensorView& grad, float unscale) {
  const char* op = "unscaled_sum_squares";
  check_dtype(grad, DType::f32, op, "grad");
  MT_CHECK(!grad.empty() || grad.numel() == 0) << op << ": grad has no data";
  switch (grad.device) {
    case Device::cpu: return cpu::unscaled_sum_squares(grad, unscale);
    case Device::cuda: break;
  }
  no_kernel(op);
}

}  // namespace mt
