#include "optim/grad_sync.h"

namespace mt {

void finalize_model_grads(ParamStore& params, Communicator* tp, Communicator* dp) {
  if (tp != nullptr && tp->size() > 1)
    for (const Param& p : params.params())
      if (p.sequence_parallel) tp->all_reduce(p.grad, ReduceOp::sum);
  if (dp == nullptr || dp->size() == 1) return;
  for (size_t b = 0; b < params.layout().buckets.size(); ++b) dp->all_reduce(params.bucket_grads(b), ReduceOp::sum);
}

}  // namespace mt
