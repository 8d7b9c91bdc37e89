// CPU kernels for ops/moe_experts.h (shapes already validated by the op; index and count values
// checked here, where they can be read). Permute/unpermute live in moe_permute.cpp, the grouped
// expert MLP in moe_grouped_mlp.cpp.
#pragma once

#include <cstdint>

#include "backend/moe_experts_args.h"
#include "tensor/tensor.h"

namespace mt::cpu {

int64_t moe_permuted_rows(const TensorView& routing_map);
void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map);
void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token);
void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs);
void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs);

// counts: the op's validated host copy of tokens_per_expert (E entries summing to inp's rows).
void moe_grouped_mlp_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act,
                         const TensorView& inp, const int32_t* counts, const TensorView& weight1,
                         const TensorView& weight2, const MoeExpertsOptions& options);
void moe_grouped_mlp_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                         const TensorView& dout, const TensorView& inp, const TensorView& pre_act, const int32_t* counts,
                         const TensorView& weight1, const TensorView& weight2, const TensorView& act,
                         const TensorView& dact, const TensorView& dpre_act, const MoeExpertsOptions& options);

}  // namespace mt::cpu
