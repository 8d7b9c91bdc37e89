// Validates the Muon ops once for every backend, then routes to the backend owning the memory
// (the CPU only for now: a CUDA build stops at the op with its name).
#include "ops/muon.h"
#include "ops/dispatch.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/muon.h"

namespace mt {

namespace {

void check_f32_like(const TensorView& t, int64_t n, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  MT_CHECK(t.numel() == n) << op << ": " << name << " is " << t.str() << ", expected " << n << " elements";
  MT_CHECK(!t.empty() || n == 0) << op << ": " << name << " has no data";
}

}  // namespace

void muon_momentum(const TensorView& m, const TensorView& update, const TensorView& grad, const MuonMomentumArgs& args) {
  const char* op = "muon_momentum";
  const int64_t n = m.numel();
  check_f32_like(m, n, op, "m");
  check_f32_like(update, n, op, "update");
  check_f32_like(grad, n, op, "grad");
  MT_CHECK(args.beta >= 0.0f && args.beta < 1.0f) << op << ": momentum " << args.beta << " must lie in [0, 1)";
  MT_CHECK(std::isfinite(args.grad_unscale) && std::isfinite(args.grad_clip))
      << op << ": grad_unscale " << args.grad_unscale << " and grad_clip " << args.grad_clip << " must be finite";
  check_same_device({m, update, grad}, op);
  MT_ROUTE_CPU_ONLY(m.device, op, muon_momentum(m, update, grad, args));
}

void muon_apply(const TensorView& param, const TensorView& update, float lr, float weight_decay,
                const TensorView& model_copy) {
  const char* op = "muon_apply";
  const int64_t n = param.numel();
  check_f32_like(param, n, op, "param");
  check_f32_like(update, n, op, "update");
  MT_CHECK(std::isfinite(lr) && std::isfinite(weight_decay))
      << op << ": lr " << lr << " and weight_decay " << weight_decay << " must be finite";
  if (model_copy.data != nullptr) {
    MT_CHECK((model_copy.dtype == DType::bf16 || model_copy.dtype == DType::f16) && model_copy.numel() == n)
        << op << ": model_copy is " << model_copy.str() << ", expected " << n << " bf16 or f16 elements";
    check_same_device({param, update, model_copy}, op);
  } else {
    check_same_device({param, update}, op);
  }
  MT_ROUTE_CPU_ONLY(param.device, op, muon_apply(param, update, lr, weight_decay, model_copy));
}

int64_t newton_schulz_workspace(int64_t rows, int64_t cols) {
  const int64_t k = std::min(rows, cols);
  return 2 * rows * cols + 2 * k * k;
}

void newton_schulz(const TensorView& x, const NewtonSchulzArgs& args, const TensorView& workspace) {
  const char* op = "newton_schulz";
  MT_CHECK(x.ndim() == 2) << op << ": x " << x.str() << " must be 2-D";
  check_dtype(x, DType::f32, op, "x");
  check_dtype(workspace, DType::f32, op, "workspace");
  MT_CHECK(workspace.numel() >= newton_schulz_workspace(x.dim(0), x.dim(1)))
      << op << ": workspace " << workspace.str() << " is smaller than the "
      << newton_schulz_workspace(x.dim(0), x.dim(1)) << " elements x " << x.str() << " needs";
  MT_CHECK(args.eps > 0.0f) << op << ": eps " << args.eps << " must be positive";
  check_same_device({x, workspace}, op);
  MT_ROUTE_CPU_ONLY(x.device, op, newton_schulz(x, args, workspace));
}

}  // namespace mt
