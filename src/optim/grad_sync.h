// Owns gradient synchronisation after the backward of a global batch's last micro-batch
// (Megatron's finalize_model_grads): the sequence-parallel norm gradients over the tensor-parallel
// group, then the whole gradient buffer over the data-parallel group. Per DESIGN invariant 5 the
// trainer asks for this; it never calls a collective on gradients itself.
#pragma once

#include "comm/communicator.h"
#include "model/params.h"

namespace mt {

// 1. Parameters computed on s/t tokens under --sequence-parallel (the norms) are all-reduced over
//    `tp` (their gradients are partial sums until then).
// 2. Every gradient is summed over `dp`, one all-reduce per bucket of the gradient buffer
//    (ParamStore::layout(); one bucket without --overlap-grad-reduce): the grad scale already
//    carries Megatron's 1/dp averaging, so a plain sum is the average.
// Null or size-1 groups skip their step.
void finalize_model_grads(ParamStore& params, Communicator* tp, Communicator* dp);

}  // namespace mt
