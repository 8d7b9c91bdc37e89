// Validates the AdamW step and the unscaled sum of squares once for every backend, then routes to
// the backend owning the memory.
#include "ops/adamw.h"
#include "ops/dispatch.h"

#include <cmath>

#include "backend/cpu/adamw.h"

namespace mt {

namespace {

void check_adamw_tensors(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                         const TensorView& model_copy, const char* op) {
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
    check_same_device({param, grad, m, v, model_copy}, op);
  } else {
    check_same_device({param, grad, m, v}, op);
  }
}

void check_adamw_params(const AdamWParams& params, const char* op) {
  MT_CHECK(params.step >= 1) << op << ": step " << params.step << " must be >= 1 (1-based, for the bias corrections)";
  MT_CHECK(params.beta1 >= 0.0f && params.beta1 < 1.0f && params.beta2 >= 0.0f && params.beta2 < 1.0f)
      << op << ": betas (" << params.beta1 << ", " << params.beta2 << ") must lie in [0, 1)";
  MT_CHECK(std::isfinite(params.lr) && std::isfinite(params.eps) && std::isfinite(params.weight_decay))
      << op << ": lr " << params.lr << ", eps " << params.eps << ", weight_decay " << params.weight_decay
      << " must be finite";
  MT_CHECK(std::isfinite(params.grad_unscale) && std::isfinite(params.grad_clip))
      << op << ": grad_unscale " << params.grad_unscale << " and grad_clip " << params.grad_clip << " must be finite";
}

int64_t sum_squares_chunks(const TensorView& grad) {
  MT_ROUTE(grad.device, "unscaled_sum_squares_multi_scratch", sum_squares_chunks(grad.numel()));
}

}  // namespace

void adamw_update(const TensorView& param, const TensorView& grad, const TensorView& m, const TensorView& v,
                  const AdamWParams& params, const TensorView& model_copy) {
  const char* op = "adamw_update";
  check_adamw_tensors(param, grad, m, v, model_copy, op);
  check_adamw_params(params, op);
  MT_ROUTE(param.device, op, adamw_update(param, grad, m, v, params, model_copy));
}

void adamw_update_multi(std::span<const AdamWTensor> tensors, const AdamWParams& params) {
  const char* op = "adamw_update_multi";
  if (tensors.empty()) return;
  check_adamw_params(params, op);
  for (const AdamWTensor& t : tensors) {
    check_adamw_tensors(t.param, t.grad, t.m, t.v, t.model_copy, op);
    MT_CHECK(std::isfinite(t.weight_decay)) << op << ": weight_decay " << t.weight_decay << " must be finite";
    MT_CHECK(t.param.device == tensors[0].param.device) << op << ": all tensors must live on one device";
  }
  MT_ROUTE(tensors[0].param.device, op, adamw_update_multi(tensors, params));
}

double unscaled_sum_squares(const TensorView& grad, float unscale) {
  const char* op = "unscaled_sum_squares";
  check_dtype(grad, DType::f32, op, "grad");
  MT_CHECK(!grad.empty() || grad.numel() == 0) << op << ": grad has no data";
  MT_ROUTE(grad.device, op, unscaled_sum_squares(grad, unscale));
}

int64_t unscaled_sum_squares_multi_scratch(std::span<const TensorView> grads) {
  // Each tensor's share is its backend's partition into chunks (which fixes the summation order).
  int64_t total = 0;
  for (const TensorView& g : grads) total += sum_squares_chunks(g);
  return total;
}

void unscaled_sum_squares_multi(std::span<const TensorView> grads, float unscale, std::span<double> scratch,
                                std::span<double> sums) {
  const char* op = "unscaled_sum_squares_multi";
  MT_CHECK(sums.size() == grads.size()) << op << ": " << sums.size() << " sums for " << grads.size() << " tensors";
  if (grads.empty()) return;
  MT_CHECK(static_cast<int64_t>(scratch.size()) >= unscaled_sum_squares_multi_scratch(grads))
      << op << ": scratch of " << scratch.size() << " doubles, needs " << unscaled_sum_squares_multi_scratch(grads);
  for (const TensorView& g : grads) {
    check_dtype(g, DType::f32, op, "grad");
    MT_CHECK(!g.empty() || g.numel() == 0) << op << ": grad has no data";
    MT_CHECK(g.device == grads[0].device) << op << ": all tensors must live on one device";
  }
  MT_ROUTE(grads[0].device, op, unscaled_sum_squares_multi(grads, unscale, scratch, sums));
}

}  // namespace mt
