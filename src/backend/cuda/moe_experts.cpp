// CUDA entry points of ops/moe_experts.h: permute/unpermute through the kernels of moe_experts.cu
// (their index scratch is reduction_scratch(), ordered by the stream), and the grouped expert MLP
// as a host loop over experts (counts are on the host) calling the CUDA linear and activation
// entry points on row slices.
//
// Unlike the CPU kernels these do not read index values on the host to check them (that would
// cost a synchronisation per op): row_token and tokens_per_expert must be as moe_permute_fwd wrote
// them; out-of-range values are kept from touching memory outside the tensors, nothing more.
#include "backend/cuda/kernels/moe_experts.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/runtime.h"

namespace mt::cuda {

namespace {

int32_t* index_scratch() {
  static_assert(k::kMoeScratchInts * sizeof(int32_t) <= kReductionScratchDoubles * sizeof(double));
  return reinterpret_cast<int32_t*>(reduction_scratch());
}

const float* optional_f32(const TensorView& t) { return t.empty() ? nullptr : t.f32(); }
float* optional_f32_mut(const TensorView& t) { return t.empty() ? nullptr : t.f32(); }

void check_experts(int64_t experts, const char* op) {
  MT_CHECK(experts <= k::kMoeMaxOffsetExperts)
      << op << ": " << experts << " experts; the CUDA kernels index at most " << k::kMoeMaxOffsetExperts;
}

}  // namespace

int64_t moe_permuted_rows(const TensorView& routing_map) {
  auto* count = reinterpret_cast<unsigned long long*>(reduction_scratch());
  k::moe_count_nonzero(count, routing_map.u8(), routing_map.numel(), stream());
  check_launch("moe_permuted_rows");
  unsigned long long host = 0;
  MT_CUDA_CHECK(cudaMemcpyAsync(&host, count, sizeof host, cudaMemcpyDeviceToHost, stream()));
  MT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  return static_cast<int64_t>(host);
}

void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map) {
  k::moe_permute_fwd(rows.f32(), row_token.i32(), tokens_per_expert.i32(), tokens.f32(), routing_map.u8(),
                     routing_map.dim(0), routing_map.dim(1), rows.dim(0), tokens.dim(1), stream());
  check_launch("moe_permute_fwd");
}

void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token) {
  const int64_t rows = drows.dim(0);
  if (rows == 0) return;
  k::moe_row_index(index_scratch(), row_token.i32(), rows, nullptr, 0, stream());
  k::moe_scatter_rows(dtokens.f32(), drows.f32(), row_token.i32(), nullptr, index_scratch(), dtokens.dim(0), rows,
                      drows.dim(1), 0, stream());
  check_launch("moe_permute_bwd");
}

void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs) {
  const int64_t experts = tokens_per_expert.dim(0);
  check_experts(experts, "moe_unpermute_fwd");
  if (out.numel() > 0) MT_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.bytes(), stream()));
  if (rows.dim(0) == 0) return;
  k::moe_row_index(index_scratch(), row_token.i32(), rows.dim(0), tokens_per_expert.i32(), experts, stream());
  k::moe_scatter_rows(out.f32(), rows.f32(), row_token.i32(), optional_f32(routing_probs), index_scratch(),
                      out.dim(0), rows.dim(0), rows.dim(1), experts, stream());
  check_launch("moe_unpermute_fwd");
}

void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs) {
  const int64_t experts = tokens_per_expert.dim(0);
  check_experts(experts, "moe_unpermute_bwd");
  if (rows.dim(0) == 0) return;
  k::moe_row_index(index_scratch(), row_token.i32(), rows.dim(0), tokens_per_expert.i32(), experts, stream());
  k::moe_unpermute_bwd(drows.f32(), optional_f32_mut(drouting_probs), dout.f32(), rows.f32(), row_token.i32(),
                       optional_f32(routing_probs), index_scratch(), rows.dim(0), dout.dim(0), rows.dim(1), experts,
                       stream());
  check_launch("moe_unpermute_bwd");
}

// ---- The grouped expert MLP: for each nonempty expert, the CUDA linear and activation entry points
// on its row slice, exactly the calls of the ops-level sequential loop (ops/moe_experts.cpp), so
// the grouped and sequential paths agree on CUDA as they do on one CPU thread. One GEMM per expert
// is what Megatron's SequentialMLP launches too; a grouped GEMM is the later speed-up.

namespace {

// Expert e's [a, b] slice of a [E, a, b] weight.
TensorView expert_weight(const TensorView& w, int64_t e) {
  return w.reshape({w.dim(0), w.dim(1) * w.dim(2)}).rows(e, 1).reshape({w.dim(1), w.dim(2)});
}

void activation_fwd(const TensorView& act, const TensorView& pre, const MoeExpertsOptions& o) {
  if (o.activation == MoeExpertActivation::swiglu) return swiglu_fwd(act, pre);
  pointwise_activation_fwd(act, pre, o.pointwise);
}

void activation_bwd(const TensorView& dpre, const TensorView& dact, const TensorView& pre, const MoeExpertsOptions& o) {
  if (o.activation == MoeExpertActivation::swiglu) return swiglu_bwd(dpre, dact, pre);
  pointwise_activation_bwd(dpre, dact, pre, o.pointwise);
}

void zero_rows(const TensorView& t) {
  if (t.numel() > 0) MT_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream()));
}

}  // namespace

void moe_grouped_mlp_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act,
                         const TensorView& inp, const int32_t* counts, const TensorView& weight1,
                         const TensorView& weight2, const MoeExpertsOptions& options) {
  int64_t r0 = 0;
  for (int64_t e = 0; e < weight1.dim(0); r0 += counts[e++]) {
    const int64_t n = counts[e];
    if (n == 0) continue;
    linear_fwd(pre_act.rows(r0, n), inp.rows(r0, n), expert_weight(weight1, e), TensorView());
    activation_fwd(act.rows(r0, n), pre_act.rows(r0, n), options);
    linear_fwd(out.rows(r0, n), act.rows(r0, n), expert_weight(weight2, e), TensorView());
  }
}

void moe_grouped_mlp_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                         const TensorView& dout, const TensorView& inp, const TensorView& pre_act, const int32_t* counts,
                         const TensorView& weight1, const TensorView& weight2, const TensorView& act,
                         const TensorView& dact, const TensorView& dpre_act, const MoeExpertsOptions& options) {
  int64_t r0 = 0;
  for (int64_t e = 0; e < weight1.dim(0); r0 += counts[e++]) {
    const int64_t n = counts[e];
    if (n == 0) continue;
    const TensorView pre = pre_act.rows(r0, n), a = act.rows(r0, n), da = dact.rows(r0, n), dp = dpre_act.rows(r0, n);
    activation_fwd(a, pre, options);
    zero_rows(da);
    linear_bwd(da, expert_weight(dweight2, e), TensorView(), dout.rows(r0, n), a, expert_weight(weight2, e));
    zero_rows(dp);
    activation_bwd(dp, da, pre, options);
    linear_bwd(dinp.empty() ? TensorView() : dinp.rows(r0, n), expert_weight(dweight1, e), TensorView(), dp,
               inp.rows(r0, n), expert_weight(weight1, e));
  }
}

}  // namespace mt::cuda
