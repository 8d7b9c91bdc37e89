// The expert computation of an MoE layer on one rank, as ops: permute the tokens into per-expert row
// groups, run every expert's MLP over its group, and combine the rows back into tokens weighted by
// the routing probabilities. Layouts follow ops/moe_router.h: tokens [T, h] with token t = i·b + j,
// routing_probs f32 [T, E] and routing_map u8 [T, E] (nonzero = routed) from moe_routing_map_fwd.
//
// Rows: R = Σ routing_map entries (padding slots included). Row order is Megatron's permute
// (moe_utils.py::permute): expert 0's tokens first, each expert's tokens in increasing token order,
// so expert e owns rows [offset_e, offset_e + n_e) with offset_e = Σ_{e' < e} n_e'.
// row_token i32 [R] (Megatron's sorted_indices) names the token of each row; tokens_per_expert
// i32 [E] holds n_e. A token may own several rows (one per expert it goes to) or none (dropped).
#pragma once

#include <cstdint>

#include "backend/moe_experts_args.h"  // MoeExpertsOptions
#include "tensor/tensor.h"

namespace mt {

// ---- Permute / unpermute (moe_utils.py::permute, unpermute with a routing map) ----

// R = the number of nonzero entries of routing_map [T, E]: the row count to allocate for permute.
// Reads the map on the host (Megatron's dropless dispatch synchronises for this count too).
int64_t moe_permuted_rows(const TensorView& routing_map);

// rows[r] = tokens[row_token[r]] for rows f32 [R, h] in the order above; writes row_token i32 [R]
// and tokens_per_expert i32 [E]. Throws when rows' R is not the map's entry count. Saves nothing:
// the backward needs row_token only.
void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map);
// Accumulates dtokens[t] += Σ_{r: row_token[r] = t} drows[r], rows added in row order (dropped
// tokens get nothing).
void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token);

// out[t] = Σ_{r: row_token[r] = t} p_r · rows[r] (overwrites out [T, h]; a token without rows is 0,
// as a dropped token is in Megatron), with p_r = routing_probs[row_token[r], e(r)] and e(r) the expert
// owning row r; routing_probs empty means p_r = 1. Each token's rows are added in row order (so in
// expert order, Megatron's deterministic index_add order), each term as one fused multiply-add.
// A padding slot has p_r = 0 and adds nothing (unless its row is not finite: 0·inf is NaN, as in torch).
void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs);
// Accumulates drows[r] += p_r · dout[row_token[r]] and, unless drouting_probs is empty,
// drouting_probs[row_token[r], e(r)] += Σ_c rows[r, c] · dout[row_token[r], c] (summed in double;
// entries without a row get nothing): the router's gradient through the combine weights.
// rows is what the forward combined (the experts' output).
void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs);

// ---- The experts' MLP over the permuted rows (experts.py::SequentialMLP, GroupedMLP) ----
//
// Weights, per expert contiguous, [out, in] as every linear here:
//   weight1 f32 [E, f1, h] with f1 = ffn (GeLU) or 2·ffn (SwiGLU: rows [gate | up])
//   weight2 f32 [E, h, ffn]
// weight1[e] is TEGroupedMLP's linear_fc1.weight{e} and SequentialMLP's local_experts.{e}.linear_fc1
// .weight as they are; GroupedMLP's weight1 [h, E·f1] is the transpose of weight1 viewed as [E·f1, h],
// and its weight2 [E·ffn, h] is weight2[e] transposed per expert. No biases (GroupedMLP has none;
// MoE models run with --disable-bias-linear).
//
// Per expert e over its rows x = inp[offset_e, +n_e):
//   pre_act = x · weight1[e]ᵀ  [n_e, f1];  act = gelu(pre_act) or swiglu(pre_act)  [n_e, ffn];
//   out     = act · weight2[e]ᵀ  [n_e, h]
// Experts with n_e = 0 are skipped (their weight gradients stay as they are).
// tokens_per_expert i32 [E] is read on the host (Megatron moves it to the CPU for the grouped GEMM
// too); the data tensors may live on any one device.
//
// options.impl: sequential calls linear_fwd / the activation op / linear_fwd per expert; grouped is
// one backend call for all experts (on CPU: one OpenMP region over row tiles of every expert, each
// tile single-threaded sgemm). With one thread the grouped kernel makes the same BLAS calls per
// expert as the sequential loop and agrees bit for bit; with several threads big experts are split
// into row tiles (and weight gradients into output-row tiles), which leaves every dot product's
// summation order to OpenBLAS's kernel: equal within fp32 rounding, |diff| ≤ ~2·K·2⁻²⁴·Σ|terms|.

// Writes out [R, h] and pre_act [R, f1] (saved for the backward); act [R, ffn] is scratch.
void moe_experts_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act, const TensorView& inp,
                     const TensorView& tokens_per_expert, const TensorView& weight1, const TensorView& weight2,
                     const MoeExpertsOptions& options);

// Accumulates dinp [R, h] (skipped when empty), dweight1 [E, f1, h] and dweight2 [E, h, ffn] from
// dout [R, h], recomputing the activation from the saved pre_act. act [R, ffn], dact [R, ffn] and
// dpre_act [R, f1] are scratch (overwritten).
void moe_experts_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                     const TensorView& dout, const TensorView& inp, const TensorView& pre_act,
                     const TensorView& tokens_per_expert, const TensorView& weight1, const TensorView& weight2,
                     const TensorView& act, const TensorView& dact, const TensorView& dpre_act,
                     const MoeExpertsOptions& options);

}  // namespace mt
