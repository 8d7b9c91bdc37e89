#include "model/blocks/moe.h"

#include <algorithm>

#include "backend/backend.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/moe_experts.h"
#include "ops/moe_router.h"
#include "parallel/context_parallel.h"
#include "parallel/mappings.h"

namespace mt {

void MoeLayerStats::reset() {
  aux_loss = z_loss = choices = dropped = 0.0;
  micro_batches = global_steps = 0;
  std::fill(tokens_per_expert.begin(), tokens_per_expert.end(), 0.0);
  std::fill(global_counts.begin(), global_counts.end(), 0.0);
}

ExpertParallel moe_group_sizes(const ModelConfig& c) {
  ExpertParallel g;
  g.ep_ranks = static_cast<int>(c.moe.expert_model_parallel_size);
  g.etp_ranks = static_cast<int>(c.moe.expert_tensor_parallel_size);
  return g;
}

ExpertDispatchOptions moe_dispatch_options(const ModelConfig& c, int64_t tokens) {
  ExpertDispatchOptions o;
  o.type = c.moe.dispatcher == MoeDispatcher::alltoall ? MoeDispatcherType::alltoall : MoeDispatcherType::allgather;
  o.num_experts = c.moe.num_experts;
  o.topk = c.moe.router.topk;
  o.capacity = c.moe.capacity;
  o.tokens = tokens;
  o.hidden = c.hidden_size;
  return o;
}

int64_t moe_max_rows(const ModelConfig& c, int64_t tokens, const ExpertParallel& groups) {
  return expert_dispatch_max_rows(moe_dispatch_options(c, tokens), groups);
}

int64_t moe_aux_count_rows(const ModelConfig& c, int64_t micro_batch) {
  return c.moe.load_balancing == MoeLoadBalancing::seq_aux_loss ? micro_batch : 1;
}

namespace {

bool has_shared_expert(const ModelConfig& c) { return c.moe.shared_expert_intermediate_size > 0; }

// N of the load-balancing loss: the micro-batch's tokens (per sequence for seq_aux_loss), all
// tensor-parallel shards and context-parallel chunks together.
int64_t aux_loss_tokens(const LayerContext& ctx, const TensorView& counts) {
  const bool global = ctx.config->moe.load_balancing == MoeLoadBalancing::global_aux_loss;
  return ctx.shape.rows() * ctx.cp.size() / counts.shape[0] * (global && ctx.dp ? ctx.dp->size() : 1);
}

// The load-balancing counts of this micro-batch: over its tokens on every tensor-parallel rank
// (their sequence shards) and context-parallel rank (their chunks: Megatron's tp_cp group), and
// for global_aux_loss over the data-parallel ranks too, as the running mean over the global
// batch's micro-batches so far (Megatron's global tokens tracker).
void reduce_aux_counts(const LayerContext& ctx, const TensorView& counts, MoeHostMirror& host) {
  if (ctx.tp.sp()) ctx.tp.comm->all_reduce(counts, ReduceOp::sum);
  if (ctx.cp.active()) ctx.cp.comm->all_reduce(counts, ReduceOp::sum);
  if (ctx.config->moe.load_balancing != MoeLoadBalancing::global_aux_loss) return;
  MT_CHECK(ctx.moe_stats != nullptr) << "global_aux_loss: the running counts live in the layer's MoeLayerStats";
  if (ctx.dp && ctx.dp->size() > 1) ctx.dp->all_reduce(counts, ReduceOp::sum);
  MoeLayerStats& s = *ctx.moe_stats;
  ++s.global_steps;
  Backend& backend = backend_for(counts.device);
  float* c = host.counts.data();  // [E]: global_aux_loss has one row of counts
  backend.copy_to_host(c, counts.data, counts.bytes());
  for (int64_t e = 0; e < counts.numel(); ++e) {
    s.global_counts[static_cast<size_t>(e)] += c[e];
    c[e] = static_cast<float>(s.global_counts[static_cast<size_t>(e)] / static_cast<double>(s.global_steps));
  }
  backend.copy_from_host(counts.data, c, counts.bytes());
}

void aux_loss_fwd(const LayerContext& ctx, const TensorView& loss, const TensorView& scores, const TensorView& counts) {
  const MoeConfig& m = ctx.config->moe;
  moe_aux_loss_fwd(loss, scores, counts, aux_loss_tokens(ctx, counts), m.router.topk, m.aux_loss_coeff);
}

// Each tensor- and context-parallel rank's z-loss is the mean over its own tokens: their sum over
// those ranks (the router's gradients are summed over both) is the whole micro-batch's mean.
double z_loss_coeff(const LayerContext& ctx) {
  return ctx.config->moe.z_loss_coeff / (ctx.tp.size() * ctx.cp.size());
}

// Sinkhorn's scores of this rank's tokens. The normalisation couples every token of the micro-batch,
// so under sequence parallelism each rank gathers all shards' logits (f32 [N, E]: small), and under
// context parallelism all chunks' (in sequence order, so the sums run as on one rank), computes the
// same scores and takes its rows.
TensorView sinkhorn_scores(const LayerContext& ctx, const TensorView& logits, const MoeScratch& sc) {
  TensorView rows = logits;  // [N, E] once gathered over the sequence shards
  if (ctx.tp.sp()) {
    gather_from_sp_fwd(ctx.tp, sc.sinkhorn_logits, logits);
    rows = sc.sinkhorn_logits;
  }
  TensorView scores = sc.sinkhorn_scores;
  if (ctx.cp.active()) {
    const int64_t s = ctx.shape.s, E = rows.shape[1];
    cp_gather_sequence(ctx.cp, sc.sinkhorn_whole.reshape({s * ctx.cp.size(), ctx.shape.b * E}),
                       rows.reshape({s, ctx.shape.b * E}), sc.sinkhorn_raw);
    moe_sinkhorn_fwd(sc.sinkhorn_scores, sc.sinkhorn_whole);
    cp_take_rows(ctx.cp, sc.sinkhorn_mine.reshape({s, ctx.shape.b * E}),
                 sc.sinkhorn_scores.reshape({s * ctx.cp.size(), ctx.shape.b * E}));
    scores = sc.sinkhorn_mine;
  } else {
    moe_sinkhorn_fwd(scores, rows);
  }
  return ctx.tp.sp() ? scores.rows(ctx.tp.first_row(scores.shape[0]), logits.shape[0]) : scores;
}

// t's bytes into host memory at `host`.
void to_host(void* host, const TensorView& t) { backend_for(t.device).copy_to_host(host, t.data, t.bytes()); }

void record_stats(const LayerContext& ctx, const MoeSaved& saved, const MoeScratch& sc) {
  MoeLayerStats& stats = *ctx.moe_stats;
  MoeHostMirror& host = *sc.host;
  const MoeConfig& m = ctx.config->moe;
  const int64_t T = saved.indices.shape[0], k = saved.indices.shape[1], E = m.num_experts;
  if (m.aux_loss()) {  // the forward's scores are still in sc.aux_scores
    aux_loss_fwd(ctx, sc.loss, sc.aux_scores, saved.aux_counts);
    to_host(&host.loss, sc.loss);
    stats.aux_loss += static_cast<double>(host.loss) / m.aux_loss_coeff;
  }
  if (m.z_loss_coeff > 0.0) {
    moe_z_loss_fwd(sc.loss, saved.logits, z_loss_coeff(ctx));
    to_host(&host.loss, sc.loss);
    stats.z_loss += static_cast<double>(host.loss) / m.z_loss_coeff;
  }
  ++stats.micro_batches;
  // From the routing map (this rank's tokens, all experts): summed over the ranks, the global counts.
  to_host(host.indices.data(), saved.indices);
  to_host(host.routing_map.data(), saved.routing_map);
  const int32_t* chosen = host.indices.data();
  const uint8_t* kept = host.routing_map.data();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) stats.tokens_per_expert[static_cast<size_t>(e)] += kept[t * E + e];
  int64_t dropped = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) dropped += kept[t * E + chosen[t * k + j]] == 0;
  stats.choices += static_cast<double>(T * k);
  stats.dropped += static_cast<double>(dropped);
}

}  // namespace

MoeSaved alloc_moe_saved(Arena& a, const ModelConfig& c, LayerShape shape, DType dtype) {
  const int64_t Nl = shape.local_rows(), E = c.moe.num_experts, k = c.moe.router.topk;
  const ExpertParallel groups = moe_group_sizes(c);
  MoeSaved s;
  s.logits = a.alloc(DType::f32, {Nl, E});
  s.probs = a.alloc(DType::f32, {Nl, k});
  s.indices = a.alloc(DType::i32, {Nl, k});
  s.routing_probs = a.alloc(DType::f32, {Nl, E});
  s.routing_map = a.alloc(DType::u8, {Nl, E});
  if (c.moe.aux_loss()) s.aux_counts = a.alloc(DType::f32, {moe_aux_count_rows(c, shape.b), E});
  s.dispatch = std::make_shared<ExpertDispatchSaved>(alloc_expert_dispatch_saved(a, moe_dispatch_options(c, Nl), groups));
  s.pre_act = a.alloc(dtype, {moe_max_rows(c, Nl, groups), c.moe_fc1_size()});
  // The shared expert is a dense MLP over the same Nl rows (its own tensor parallelism included).
  if (has_shared_expert(c)) s.shared = alloc_mlp_saved(a, c.shared_expert_config(), shape, dtype);
  return s;
}

MoeScratch alloc_moe_scratch_fwd(Arena& a, const ModelConfig& c, LayerShape shape) {
  const int64_t Nl = shape.local_rows();
  const ExpertParallel groups = moe_group_sizes(c);
  const int64_t R = moe_max_rows(c, Nl, groups);
  MoeScratch sc;
  sc.host = std::make_shared<MoeHostMirror>();
  sc.host->indices.resize(static_cast<size_t>(Nl * c.moe.router.topk));
  sc.host->routing_map.resize(static_cast<size_t>(Nl * c.moe.num_experts));
  sc.host->counts.resize(static_cast<size_t>(moe_aux_count_rows(c, shape.b) * c.moe.num_experts));
  sc.act = a.alloc(DType::f32, {R, c.moe.ffn_hidden_size});
  sc.expert_out = a.alloc(DType::f32, {R, c.hidden_size});
  sc.loss = a.alloc(DType::f32, {1});
  if (c.moe.aux_loss()) sc.aux_scores = a.alloc(DType::f32, {Nl, c.moe.num_experts});
  if (c.moe.router.sinkhorn) {
    const int64_t N = shape.rows(), E = c.moe.num_experts, cp = c.context_parallel_size;
    sc.sinkhorn_scores = a.alloc(DType::f32, {cp * N, E});
    if (shape.sp > 1) sc.sinkhorn_logits = a.alloc(DType::f32, {N, E});
    if (cp > 1) {
      sc.sinkhorn_raw = a.alloc(DType::f32, {cp * N, E});
      sc.sinkhorn_whole = a.alloc(DType::f32, {cp * N, E});
      sc.sinkhorn_mine = a.alloc(DType::f32, {N, E});
    }
  }
  sc.dispatch =
      std::make_shared<ExpertDispatchScratch>(alloc_expert_dispatch_scratch(a, moe_dispatch_options(c, Nl), groups));
  if (has_shared_expert(c)) {
    sc.shared_out = a.alloc(DType::f32, {Nl, c.hidden_size});
    sc.shared = alloc_mlp_scratch_fwd(a, c.shared_expert_config(), shape);
  }
  if (c.recompute_moe) sc.recomputed = alloc_moe_saved(a, c, shape, DType::f32);
  return sc;
}

void alloc_moe_scratch_bwd(Arena& a, MoeScratch& sc, const ModelConfig& c, LayerShape shape) {
  const int64_t Nl = shape.local_rows(), E = c.moe.num_experts, k = c.moe.router.topk, h = c.hidden_size;
  const int64_t R = moe_max_rows(c, Nl, moe_group_sizes(c));
  sc.dact = a.alloc(DType::f32, {R, c.moe.ffn_hidden_size});
  sc.dpre_act = a.alloc(DType::f32, {R, c.moe_fc1_size()});
  sc.drows = a.alloc(DType::f32, {R, h});
  sc.dlogits = a.alloc(DType::f32, {Nl, E});
  sc.dprobs = a.alloc(DType::f32, {Nl, k});
  sc.drouting_probs = a.alloc(DType::f32, {Nl, E});
  if (c.moe.aux_loss()) sc.daux_scores = a.alloc(DType::f32, {Nl, E});
  if (has_shared_expert(c)) alloc_mlp_scratch_bwd(a, sc.shared, c.shared_expert_config(), shape);
}

void moe_block_fwd(const LayerContext& ctx, const MoeWeights& w, const TensorView& inp, const MoeSaved& saved,
                   const MoeScratch& sc, const TensorView& sp_gathered, const TensorView& sp_partial,
                   const TensorView& out) {
  const ModelConfig& c = *ctx.config;
  const MoeConfig& m = c.moe;
  linear_fwd(saved.logits, inp, w.router_weight, TensorView());
  if (!m.router_fp32) ctx.round(saved.logits);
  // Sinkhorn balances the choice in training only (Megatron's self.training, our dropout switch).
  const bool balance = m.router.sinkhorn && ctx.dropout;
  moe_router_fwd(saved.probs, saved.indices, saved.logits, w.expert_bias,
                 balance ? sinkhorn_scores(ctx, saved.logits, sc) : TensorView(), m.router);
  moe_routing_map_fwd(saved.routing_probs, saved.routing_map, saved.probs, saved.indices, m.capacity);
  if (m.aux_loss() && ctx.aux_loss_scale != 0.0f) {
    // Training only (a backward follows). The counts the loss weighs the scores by: over the whole
    // micro-batch's tokens, so summed over the tensor-parallel ranks' sequence shards.
    moe_aux_scores_fwd(sc.aux_scores, saved.aux_counts, saved.logits, m.router.topk, m.router.score_function);
    reduce_aux_counts(ctx, saved.aux_counts, *sc.host);
  }
  // Tokens to their experts' ranks, the experts, and their outputs back, weighted.
  const ExpertDispatchOptions options = moe_dispatch_options(c, inp.shape[0]);
  ExpertDispatchSaved& d = *saved.dispatch;
  expert_dispatch_fwd(options, ctx.experts, d, *sc.dispatch, inp, saved.routing_probs, saved.routing_map);
  const int64_t R = d.num_rows;
  const TensorView expert_out = sc.expert_out.rows(0, R), pre_act = saved.pre_act.rows(0, R);
  moe_experts_fwd(expert_out, pre_act, sc.act.rows(0, R), d.expert_rows(), d.expert_counts(), w.experts_fc1,
                  w.experts_fc2, c.moe_experts_options());
  ctx.round(pre_act);
  ctx.round(expert_out);
  expert_combine_fwd(options, ctx.experts, d, *sc.dispatch, out, expert_out);
  if (has_shared_expert(c)) {
    mlp_block_fwd(ctx, w.shared, inp, saved.shared, sc.shared, sp_gathered, sp_partial, sc.shared_out);
    accumulate(out, sc.shared_out);
  }
  ctx.round(out);
  if (ctx.moe_stats) record_stats(ctx, saved, sc);
}

void moe_block_bwd(const LayerContext& ctx, const MoeWeights& w, const MoeWeights& g, const TensorView& inp,
                   const MoeSaved& saved, const MoeScratch& sc, const TensorView& sp_gathered,
                   const TensorView& sp_partial, const TensorView& dout, const TensorView& din) {
  const ModelConfig& c = *ctx.config;
  const MoeConfig& m = c.moe;
  const ExpertDispatchOptions options = moe_dispatch_options(c, inp.shape[0]);
  ExpertDispatchSaved& d = *saved.dispatch;
  const int64_t R = d.num_rows;
  const TensorView dexpert_out = sc.expert_out.rows(0, R), drows = sc.drows.rows(0, R);
  // The combine: gradients of the experts' rows and of the routing weights.
  zero(sc.drouting_probs);
  expert_combine_bwd(options, ctx.experts, d, *sc.dispatch, dexpert_out, sc.drouting_probs, dout);
  ctx.round(dexpert_out);
  zero(drows);
  moe_experts_bwd(drows, g.experts_fc1, g.experts_fc2, dexpert_out, d.expert_rows(), saved.pre_act.rows(0, R),
                  d.expert_counts(), w.experts_fc1, w.experts_fc2, sc.act.rows(0, R), sc.dact.rows(0, R),
                  sc.dpre_act.rows(0, R), c.moe_experts_options());
  ctx.round(drows);
  zero(din);
  expert_dispatch_bwd(options, ctx.experts, d, *sc.dispatch, din, drows);
  // The router: through the routing weights, then the losses' gradients (as the auto-scaler
  // gives them: aux_loss_scale each).
  zero(sc.dprobs);
  moe_routing_map_bwd(sc.dprobs, sc.drouting_probs, saved.routing_map, saved.indices);
  zero(sc.dlogits);
  moe_router_bwd(sc.dlogits, sc.dprobs, saved.logits, saved.indices, m.router);
  if (m.aux_loss() && ctx.aux_loss_scale != 0.0f) {
    zero(sc.daux_scores);
    moe_aux_loss_bwd(sc.daux_scores, ctx.aux_loss_scale, saved.aux_counts, aux_loss_tokens(ctx, saved.aux_counts),
                     m.router.topk, m.aux_loss_coeff);
    moe_aux_scores_bwd(sc.dlogits, sc.daux_scores, saved.logits, m.router.score_function);
  }
  if (m.z_loss_coeff > 0.0 && ctx.aux_loss_scale != 0.0f) moe_z_loss_bwd(sc.dlogits, ctx.aux_loss_scale, saved.logits, z_loss_coeff(ctx));
  linear_bwd(din, g.router_weight, TensorView(), sc.dlogits, inp, w.router_weight);
  if (has_shared_expert(c)) {
    mlp_block_bwd(ctx, w.shared, g.shared, inp, saved.shared, sc.shared, sp_gathered, sp_partial, dout,
                  sc.shared_out);
    accumulate(din, sc.shared_out);
  }
  ctx.round(din);
}

}  // namespace mt
