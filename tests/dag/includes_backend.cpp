// Built by the dag_allowed_include_builds test as if it were part of backend/ (a target linking only
// mt_backend): headers of backend and of what it links (tensor, base) must be found. It is the
// twin of includes_ops.cpp, proving that the build command itself works.
#include "backend/backend.h"
#include "base/error.h"
#include "tensor/tensor.h"

namespace mt::dag_check {

Device device_of(const TensorView& t) { return t.device; }

}  // namespace mt::dag_check
