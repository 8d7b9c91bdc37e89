// Validates the MoE permute/unpermute and expert-MLP ops once for every backend, then routes to the
// backend owning the memory. The sequential expert MLP is written here, over the linear and
// activation ops, so it runs on every backend and stays the reference the grouped kernels answer to.
#include "ops/moe_experts.h"
#include "ops/dispatch.h"

#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/moe_experts.h"
#include "ops/activation.h"
#include "ops/linear.h"

namespace mt {

namespace {

// routing_map u8 [T, E] with E ≥ 1; returns E.
int64_t check_map(const TensorView& routing_map, const char* op) {
  check_dtype(routing_map, DType::u8, op, "routing_map");
  MT_CHECK(routing_map.ndim() == 2 && routing_map.dim(1) > 0)
      << op << ": routing_map is " << routing_map.str() << "; expected [tokens, experts] with experts > 0";
  check_tensor(routing_map, routing_map.shape, DType::u8, op, "routing_map");
  return routing_map.dim(1);
}

// A 2-D f32 tensor [?, ?]; returns its rows.
int64_t check_matrix(const TensorView& t, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  MT_CHECK(t.ndim() == 2) << op << ": " << name << " is " << t.str() << "; expected 2-D";
  check_tensor(t, t.shape, DType::f32, op, name);
  return t.dim(0);
}

// tokens_per_expert i32 [E] (E ≥ 1); returns E.
int64_t check_counts(const TensorView& counts, const char* op) {
  check_dtype(counts, DType::i32, op, "tokens_per_expert");
  MT_CHECK(counts.ndim() == 1 && counts.dim(0) > 0)
      << op << ": tokens_per_expert is " << counts.str() << "; expected [experts] with experts > 0";
  check_tensor(counts, counts.shape, DType::i32, op, "tokens_per_expert");
  return counts.dim(0);
}

// ---- The expert MLP's shapes ----

struct ExpertDims {
  int64_t experts, f1, hidden, ffn, rows;
};

ExpertDims check_experts(const TensorView& inp, const TensorView& counts, const TensorView& weight1,
                         const TensorView& weight2, const MoeExpertsOptions& o, const char* op) {
  MT_CHECK(o.activation == MoeExpertActivation::pointwise || o.activation == MoeExpertActivation::swiglu)
      << op << ": unknown MoeExpertActivation " << static_cast<int>(o.activation);
  MT_CHECK(o.pointwise == PointwiseActivation::gelu || o.pointwise == PointwiseActivation::gelu_tanh ||
           o.pointwise == PointwiseActivation::squared_relu)
      << op << ": unknown PointwiseActivation " << static_cast<int>(o.pointwise);
  MT_CHECK(o.impl == MoeExpertsImpl::sequential || o.impl == MoeExpertsImpl::grouped)
      << op << ": unknown MoeExpertsImpl " << static_cast<int>(o.impl);
  MT_CHECK(weight1.ndim() == 3 && weight2.ndim() == 3)
      << op << ": weight1 " << weight1.str() << " and weight2 " << weight2.str()
      << " must be 3-D: [experts, f1, hidden] and [experts, hidden, ffn]";
  ExpertDims d{weight1.dim(0), weight1.dim(1), weight1.dim(2), weight2.dim(2), 0};
  const bool glu = o.activation == MoeExpertActivation::swiglu;
  MT_CHECK(d.f1 == (glu ? 2 * d.ffn : d.ffn))
      << op << ": weight1 " << weight1.str() << " has " << d.f1 << " output rows per expert; with "
      << (glu ? "SwiGLU" : "GeLU") << " and weight2 " << weight2.str() << " it needs " << (glu ? 2 * d.ffn : d.ffn)
      << (glu ? " (2·ffn: [gate | up])" : " (ffn)");
  check_tensor(weight1, weight1.shape, DType::f32, op, "weight1");
  check_tensor(weight2, {d.experts, d.hidden, d.ffn}, DType::f32, op, "weight2");
  check_counts(counts, op);
  check_shape(counts, {d.experts}, op, "tokens_per_expert");
  MT_CHECK(counts.device == Device::cpu)
      << op << ": tokens_per_expert must be in host memory (copy the counts to the host first)";
  d.rows = check_matrix(inp, op, "inp");
  check_shape(inp, {d.rows, d.hidden}, op, "inp");
  int64_t sum = 0;
  for (int64_t e = 0; e < d.experts; ++e) {
    const int32_t n = counts.i32()[e];
    MT_CHECK(n >= 0) << op << ": tokens_per_expert[" << e << "] = " << n << " is negative";
    sum += n;
  }
  MT_CHECK(sum == d.rows) << op << ": tokens_per_expert sums to " << sum << " but inp has " << d.rows << " rows";
  return d;
}

// Expert e's [a, b] slice of a [E, a, b] weight.
TensorView expert_weight(const TensorView& w, int64_t e) {
  const TensorView slice = w.reshape({w.dim(0), w.dim(1) * w.dim(2)}).rows(e, 1);
  return slice.reshape({w.dim(1), w.dim(2)});
}

void activation_fwd(const TensorView& act, const TensorView& pre, const MoeExpertsOptions& o) {
  if (o.activation == MoeExpertActivation::swiglu) return swiglu_fwd(act, pre);
  pointwise_activation_fwd(act, pre, o.pointwise);
}

void activation_bwd(const TensorView& dpre, const TensorView& dact, const TensorView& pre, const MoeExpertsOptions& o) {
  if (o.activation == MoeExpertActivation::swiglu) return swiglu_bwd(dpre, dact, pre);
  pointwise_activation_bwd(dpre, dact, pre, o.pointwise);
}

}  // namespace

int64_t moe_permuted_rows(const TensorView& routing_map) {
  const char* op = "moe_permuted_rows";
  check_map(routing_map, op);
  MT_ROUTE(routing_map.device, op, moe_permuted_rows(routing_map));
}

void moe_permute_fwd(const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                     const TensorView& tokens, const TensorView& routing_map) {
  const char* op = "moe_permute_fwd";
  const int64_t experts = check_map(routing_map, op), t = routing_map.dim(0);
  check_matrix(tokens, op, "tokens");
  const int64_t hidden = tokens.dim(1);
  check_shape(tokens, {t, hidden}, op, "tokens (one row per routing_map row)");
  const int64_t r = check_matrix(rows, op, "rows");
  check_shape(rows, {r, hidden}, op, "rows");
  check_tensor(row_token, {r}, DType::i32, op, "row_token");
  check_counts(tokens_per_expert, op);
  check_shape(tokens_per_expert, {experts}, op, "tokens_per_expert");
  check_same_device({rows, row_token, tokens_per_expert, tokens, routing_map}, op);
  MT_ROUTE(tokens.device, op, moe_permute_fwd(rows, row_token, tokens_per_expert, tokens, routing_map));
}

void moe_permute_bwd(const TensorView& dtokens, const TensorView& drows, const TensorView& row_token) {
  const char* op = "moe_permute_bwd";
  check_matrix(dtokens, op, "dtokens");
  const int64_t r = check_matrix(drows, op, "drows");
  check_shape(drows, {r, dtokens.dim(1)}, op, "drows");
  check_tensor(row_token, {r}, DType::i32, op, "row_token");
  check_same_device({dtokens, drows, row_token}, op);
  MT_ROUTE(dtokens.device, op, moe_permute_bwd(dtokens, drows, row_token));
}

void moe_unpermute_fwd(const TensorView& out, const TensorView& rows, const TensorView& row_token,
                       const TensorView& tokens_per_expert, const TensorView& routing_probs) {
  const char* op = "moe_unpermute_fwd";
  const int64_t t = check_matrix(out, op, "out");
  const int64_t r = check_matrix(rows, op, "rows");
  check_shape(rows, {r, out.dim(1)}, op, "rows");
  check_tensor(row_token, {r}, DType::i32, op, "row_token");
  const int64_t experts = check_counts(tokens_per_expert, op);
  if (!routing_probs.empty()) check_tensor(routing_probs, {t, experts}, DType::f32, op, "routing_probs");
  check_same_device({out, rows, row_token, tokens_per_expert, routing_probs}, op);
  MT_ROUTE(out.device, op, moe_unpermute_fwd(out, rows, row_token, tokens_per_expert, routing_probs));
}

void moe_unpermute_bwd(const TensorView& drows, const TensorView& drouting_probs, const TensorView& dout,
                       const TensorView& rows, const TensorView& row_token, const TensorView& tokens_per_expert,
                       const TensorView& routing_probs) {
  const char* op = "moe_unpermute_bwd";
  const int64_t t = check_matrix(dout, op, "dout");
  const int64_t r = check_matrix(rows, op, "rows");
  check_shape(rows, {r, dout.dim(1)}, op, "rows");
  check_tensor(drows, rows.shape, DType::f32, op, "drows");
  check_tensor(row_token, {r}, DType::i32, op, "row_token");
  const int64_t experts = check_counts(tokens_per_expert, op);
  if (!routing_probs.empty()) check_tensor(routing_probs, {t, experts}, DType::f32, op, "routing_probs");
  if (!drouting_probs.empty()) check_tensor(drouting_probs, {t, experts}, DType::f32, op, "drouting_probs");
  check_same_device({drows, drouting_probs, dout, rows, row_token, tokens_per_expert, routing_probs}, op);
  MT_ROUTE(dout.device, op, moe_unpermute_bwd(drows, drouting_probs, dout, rows, row_token, tokens_per_expert, routing_probs));
}

void moe_experts_fwd(const TensorView& out, const TensorView& pre_act, const TensorView& act, const TensorView& inp,
                     const TensorView& tokens_per_expert, const TensorView& weight1, const TensorView& weight2,
                     const MoeExpertsOptions& options) {
  const char* op = "moe_experts_fwd";
  const ExpertDims d = check_experts(inp, tokens_per_expert, weight1, weight2, options, op);
  check_tensor(out, {d.rows, d.hidden}, DType::f32, op, "out");
  check_tensor(pre_act, {d.rows, d.f1}, DType::f32, op, "pre_act");
  check_tensor(act, {d.rows, d.ffn}, DType::f32, op, "act");
  check_same_device({out, pre_act, act, inp, weight1, weight2}, op);
  const int32_t* counts = tokens_per_expert.i32();
  if (options.impl == MoeExpertsImpl::sequential) {
    int64_t r0 = 0;
    for (int64_t e = 0; e < d.experts; r0 += counts[e++]) {
      const int64_t n = counts[e];
      if (n == 0) continue;
      linear_fwd(pre_act.rows(r0, n), inp.rows(r0, n), expert_weight(weight1, e), TensorView());
      activation_fwd(act.rows(r0, n), pre_act.rows(r0, n), options);
      linear_fwd(out.rows(r0, n), act.rows(r0, n), expert_weight(weight2, e), TensorView());
    }
    return;
  }
  MT_ROUTE(inp.device, op, moe_grouped_mlp_fwd(out, pre_act, act, inp, counts, weight1, weight2, options));
}

void moe_experts_bwd(const TensorView& dinp, const TensorView& dweight1, const TensorView& dweight2,
                     const TensorView& dout, const TensorView& inp, const TensorView& pre_act,
                     const TensorView& tokens_per_expert, const TensorView& weight1, const TensorView& weight2,
                     const TensorView& act, const TensorView& dact, const TensorView& dpre_act,
                     const MoeExpertsOptions& options) {
  const char* op = "moe_experts_bwd";
  const ExpertDims d = check_experts(inp, tokens_per_expert, weight1, weight2, options, op);
  if (!dinp.empty()) check_tensor(dinp, inp.shape, DType::f32, op, "dinp");
  check_tensor(dweight1, weight1.shape, DType::f32, op, "dweight1");
  check_tensor(dweight2, weight2.shape, DType::f32, op, "dweight2");
  check_tensor(dout, {d.rows, d.hidden}, DType::f32, op, "dout");
  check_tensor(pre_act, {d.rows, d.f1}, DType::f32, op, "pre_act");
  check_tensor(act, {d.rows, d.ffn}, DType::f32, op, "act");
  check_tensor(dact, {d.rows, d.ffn}, DType::f32, op, "dact");
  check_tensor(dpre_act, {d.rows, d.f1}, DType::f32, op, "dpre_act");
  check_same_device({dinp, dweight1, dweight2, dout, inp, pre_act, weight1, weight2, act, dact, dpre_act}, op);
  const int32_t* counts = tokens_per_expert.i32();
  if (options.impl == MoeExpertsImpl::sequential) {
    int64_t r0 = 0;
    for (int64_t e = 0; e < d.experts; r0 += counts[e++]) {
      const int64_t n = counts[e];
      if (n == 0) continue;
      const TensorView pre = pre_act.rows(r0, n), a = act.rows(r0, n), da = dact.rows(r0, n),
                       dp = dpre_act.rows(r0, n);
      activation_fwd(a, pre, options);
      zero(da);
      linear_bwd(da, expert_weight(dweight2, e), TensorView(), dout.rows(r0, n), a, expert_weight(weight2, e));
      zero(dp);
      activation_bwd(dp, da, pre, options);
      linear_bwd(dinp.empty() ? TensorView() : dinp.rows(r0, n), expert_weight(dweight1, e), TensorView(), dp,
                 inp.rows(r0, n), expert_weight(weight1, e));
    }
    return;
  }
  MT_ROUTE(inp.device, op, moe_grouped_mlp_bwd(dinp, dweight1, dweight2, dout, inp, pre_act, counts, weight1, weight2, act, dact, dpre_act, options));
}

}  // namespace mt
