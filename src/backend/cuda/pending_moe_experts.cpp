// Placeholders for the moe experts ops until their CUDA kernels land (issue 25): each
// names itself, so a CUDA run stops with a clear message instead of a wrong result.
#include "backend/cuda/ops.h"

namespace mt::cuda {

int64_t moe_permuted_rows(const TensorView& routing_map) {
  MT_FAIL() << "moe_permuted_rows: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map) {
  MT_FAIL() << "moe_permute_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token) {
  MT_FAIL() << "moe_permute_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs) {
  MT_FAIL() << "moe_unpermute_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs) {
  MT_FAIL() << "moe_unpermute_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_grouped_mlp_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act,
                         const TensorView& inp, const int32_t* counts, const TensorView& weight1,
                         const TensorView& weight2, const MoeExpertsOptions& options) {
  MT_FAIL() << "moe_grouped_mlp_fwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

void moe_grouped_mlp_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                         const TensorView& dout, const TensorView& inp, const TensorView& pre_act, const int32_t* counts,
                         const TensorView& weight1, const TensorView& weight2, const TensorView& act,
                         const TensorView& dact, const TensorView& dpre_act, const MoeExpertsOptions& options) {
  MT_FAIL() << "moe_grouped_mlp_bwd: no CUDA kernel yet (issue 25); run with --device cpu";
}

}  // namespace mt::cuda
