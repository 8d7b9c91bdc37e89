// The MoE token dispatchers: the worst-case sizes, the host-side count exchange, the chunk sort of
// the alltoall dispatcher and the gathers of the allgather one, over the permute/unpermute ops.
// Every row copy goes through the backend owning the memory (as in mappings.cpp).
#include "parallel/expert_dispatch.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "ops/elementwise.h"
#include "ops/moe_experts.h"
#include "ops/moe_router.h"

namespace mt {

namespace {

// Sizes derived from the options and the group sizes: the same on every rank of the groups.
struct Layout {
  int64_t T, h, E, El, ep, etp, G;
  int64_t A;      // rows one source rank routes to one ep rank's experts
  int64_t L_max;  // rows of one rank's own permutation
  int64_t R_max;  // G·A: rows this rank's experts receive
  bool exchange;  // alltoall with G > 1 (otherwise the allgather path, which is the plain ops for G = 1)
  int64_t p_max() const { return exchange ? L_max : R_max; }
  int64_t w() const { return exchange ? T : G * T; }
};

Layout layout_of(const ExpertDispatchOptions& o, const ExpertParallel& g, const char* op) {
  MT_CHECK(o.type == MoeDispatcherType::allgather || o.type == MoeDispatcherType::alltoall)
      << op << ": unknown MoeDispatcherType " << static_cast<int>(o.type);
  MT_CHECK(o.num_experts >= 1 && o.num_experts <= kMoeMaxExperts)
      << op << ": --num-experts is " << o.num_experts << "; expected 1.." << kMoeMaxExperts;
  MT_CHECK(o.topk >= 1 && o.topk <= o.num_experts)
      << op << ": --moe-router-topk " << o.topk << " must lie in [1, --num-experts " << o.num_experts << "]";
  MT_CHECK(o.tokens >= 1 && o.hidden >= 1)
      << op << ": tokens " << o.tokens << " and hidden " << o.hidden << " must be positive";
  MT_CHECK(o.capacity.capacity_factor || !o.capacity.pad_to_capacity)
      << op << ": --moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor";
  Layout l{};
  l.T = o.tokens, l.h = o.hidden, l.E = o.num_experts, l.ep = g.ep_size(), l.etp = g.etp_size();
  l.G = l.ep * l.etp;
  MT_CHECK(l.E % l.ep == 0) << op << ": --num-experts " << l.E
                            << " is not divisible by --expert-model-parallel-size " << l.ep;
  l.El = l.E / l.ep;
  if (o.type == MoeDispatcherType::allgather && l.G > 1 && (g.ep || g.etp)) {  // real groups, not sizes alone
    MT_CHECK(g.etp_ep && g.etp_ep->size() == l.G)
        << op << ": the allgather dispatcher gathers over etp × ep: ExpertParallel::etp_ep must be a group of "
        << l.G << " ranks (got " << (g.etp_ep ? std::to_string(g.etp_ep->size()) : std::string("none")) << ")";
  }
  const int64_t k_local = std::min(o.topk, l.El);
  l.A = l.T * k_local;
  l.L_max = l.T * o.topk;
  if (o.capacity.capacity_factor) {
    const int64_t cap = std::min(moe_expert_capacity(l.T, l.E, o.topk, *o.capacity.capacity_factor), l.T);
    if (o.capacity.pad_to_capacity) {
      l.A = l.El * cap;
      l.L_max = l.E * cap;
    } else {
      l.A = std::min(l.A, l.El * cap);
      l.L_max = std::min(l.L_max, l.E * cap);
    }
  }
  l.R_max = l.G * l.A;
  l.exchange = o.type == MoeDispatcherType::alltoall && l.G > 1;
  return l;
}

void check_buffers(const Layout& l, const ExpertDispatchSaved& s, const ExpertDispatchScratch& x, const char* op) {
  const bool ok = s.rows.numel() == l.R_max * l.h && s.probs.numel() == l.w() * l.E &&
                  s.combined.numel() == l.p_max() * l.h && s.tokens_per_expert.size() == static_cast<size_t>(l.El) &&
                  x.routes.size() == static_cast<size_t>(l.E) &&
                  (!l.exchange || x.exchanged.numel() == l.R_max * l.h) &&
                  (l.exchange || l.G == 1 || x.gathered.numel() == l.G * l.T * l.h);
  MT_CHECK(ok) << op << ": the saved or scratch buffers were carved for other options or groups (rows "
               << s.rows.str() << ", probs " << s.probs.str() << "; expected " << l.R_max << " rows of " << l.h
               << " and " << l.w() << " x " << l.E << " probs)";
}

void check_f32(const TensorView& t, int64_t rows, int64_t cols, const char* op, const char* name) {
  check_dtype(t, DType::f32, op, name);
  check_shape(t, {rows, cols}, op, name);
}

// routes[e] = Σ_t map[t, e] over rows [first_row, first_row + n) of map (u8 [*, E]), read on the
// host: in place in host memory, else from a copy in host_map (as Megatron moves tokens_per_expert
// to the CPU); the per-rank routing bounds are checked by the callers.
void count_routes(const TensorView& map, int64_t first_row, int64_t n, int64_t E, std::vector<uint8_t>& host_map,
                  int64_t* routes) {
  std::fill(routes, routes + E, 0);
  const uint8_t* m = static_cast<const uint8_t*>(map.data) + first_row * E;
  if (map.device != Device::cpu) {
    const auto bytes = static_cast<size_t>(n * E);
    MT_CHECK(host_map.size() >= bytes) << "expert dispatch: the routing map's host copy holds " << host_map.size()
                                       << " bytes, " << bytes << " needed";
    backend_for(map.device).copy_to_host(host_map.data(), m, bytes);
    m = host_map.data();
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < E; ++e) routes[e] += m[t * E + e] != 0;
}

// Empty when one source's routes (routes[E]) fit the bounds, else what is wrong.
std::string route_bound_error(const Layout& l, const int64_t* routes) {
  int64_t total = 0;
  for (int64_t i = 0; i < l.ep; ++i) {
    int64_t to_i = 0;
    for (int64_t e = i * l.El; e < (i + 1) * l.El; ++e) to_i += routes[e];
    total += to_i;
    if (to_i > l.A)
      return std::to_string(to_i) + " rows for ep rank " + std::to_string(i) + "'s experts, above the bound " +
             std::to_string(l.A);
  }
  if (total > l.L_max) return std::to_string(total) + " rows, above the bound " + std::to_string(l.L_max);
  return {};
}

[[noreturn]] void fail_bounds(const std::string& who, const std::string& what, const char* op) {
  MT_FAIL() << op << ": " << who << " routes " << what
            << " of these options (tokens, --moe-router-topk, capacity): make the routing map with "
               "moe_routing_map_fwd and the same options";
}

// dst rows [d, d + n) = src rows [s, s + n) (f32 [*, h]).
void copy_rows(const TensorView& dst, int64_t d, const TensorView& src, int64_t s, int64_t n) {
  if (n > 0) copy_tensor(dst.rows(d, n), src.rows(s, n));
}

void zero_rows(const TensorView& t, int64_t first, int64_t n) {
  if (n > 0) zero(t.rows(first, n));
}

TensorView flat(const TensorView& t) { return t.reshape({t.numel()}); }

// ---- alltoall: the chunks of the ep exchange and the etp parts ----

// Rows per etp part (each etp rank's received rows, from saved.chunk_rows) into x.part_rows;
// returns the largest, the padded part size.
int64_t parts_of(const Layout& l, const ExpertDispatchSaved& s, ExpertDispatchScratch& x) {
  int64_t max = 0;
  for (int64_t j = 0; j < l.etp; ++j) {
    x.part_rows[j] = 0;
    for (int64_t c = 0; c < l.ep * l.El; ++c) x.part_rows[j] += s.chunk_rows[j * l.ep * l.El + c];
    max = std::max(max, x.part_rows[j]);
  }
  return max;
}

// f(at, row, n) for every chunk (etp source j, ep source s, local expert e) of n rows, in the
// experts' order (e, j, s): `row` is its first row there, `at` its first row in the exchange buffer,
// where it follows, in padded part j, the chunks (s', e') < (s, e) (Megatron's sort_chunks_by_idxs).
template <typename F>
void for_each_chunk(const Layout& l, const ExpertDispatchSaved& s, int64_t part, F&& f) {
  int64_t row = 0;
  for (int64_t e = 0; e < l.El; ++e)
    for (int64_t j = 0; j < l.etp; ++j) {
      int64_t at = j * part;
      for (int64_t src = 0; src < l.ep; ++src) {
        const int64_t* chunk = &s.chunk_rows[(j * l.ep + src) * l.El];
        for (int64_t e2 = 0; e2 < e; ++e2) at += chunk[e2];
        f(at, row, chunk[e]);
        row += chunk[e];
        for (int64_t e2 = e; e2 < l.El; ++e2) at += chunk[e2];
      }
    }
}

// The all_to_all_v counts (elements) of the ep exchange towards the experts: this rank sends
// saved.sent_rows[i] rows to ep rank i and receives from ep rank s what s (at this etp rank) routed
// to the local experts.
void exchange_counts(const Layout& l, const ExpertParallel& g, const ExpertDispatchSaved& s, ExpertDispatchScratch& x) {
  const int64_t me = g.etp_rank();
  for (int64_t i = 0; i < l.ep; ++i) {
    x.send_counts[i] = s.sent_rows[i] * l.h;
    int64_t from_i = 0;
    for (int64_t e = 0; e < l.El; ++e) from_i += s.chunk_rows[(me * l.ep + i) * l.El + e];
    x.recv_counts[i] = from_i * l.h;
  }
}

void all_to_all(Communicator* comm, const TensorView& out, std::span<const int64_t> recv_counts,
                const TensorView& in, std::span<const int64_t> send_counts) {
  if (comm) return comm->all_to_all_v(out, recv_counts, in, send_counts);
  if (in.numel() > 0) copy_tensor(out, in);
}

// Permuted rows [L, h] (this rank's, expert order) → the experts' rows [R, h] (local expert, etp
// source, ep source order): all_to_all_v over ep, all-gather over etp (parts padded to the largest),
// sort the chunks.
void send_rows(const Layout& l, const ExpertParallel& g, const ExpertDispatchSaved& s, ExpertDispatchScratch& x,
               const TensorView& expert_rows, const TensorView& permuted) {
  const int64_t part = parts_of(l, s, x), me = g.etp_rank(), received = x.part_rows[me];
  exchange_counts(l, g, s, x);
  const TensorView mine = x.exchanged.rows(me * part, part);
  all_to_all(g.ep, flat(mine.rows(0, received)), x.recv_counts, flat(permuted), x.send_counts);
  if (l.etp > 1) {
    zero_rows(mine, received, part - received);  // padding: travels, never read
    g.etp->all_gather(flat(x.exchanged.rows(0, l.etp * part)), flat(mine));
  }
  for_each_chunk(l, s, part,
                 [&](int64_t at, int64_t row, int64_t n) { copy_rows(expert_rows, row, x.exchanged, at, n); });
}

// The reverse: the experts' rows [R, h] (partial sums under etp) → this rank's permuted rows [L, h]:
// unsort into the padded parts, reduce-scatter over etp (the sum of the partial outputs), all_to_all_v
// back over ep.
void return_rows(const Layout& l, const ExpertParallel& g, const ExpertDispatchSaved& s, ExpertDispatchScratch& x,
                 const TensorView& permuted, const TensorView& expert_rows) {
  const int64_t part = parts_of(l, s, x), me = g.etp_rank();
  for_each_chunk(l, s, part,
                 [&](int64_t at, int64_t row, int64_t n) { copy_rows(x.exchanged, at, expert_rows, row, n); });
  TensorView back = x.exchanged.rows(0, x.part_rows[me]);
  if (l.etp > 1) {
    for (int64_t j = 0; j < l.etp; ++j) zero_rows(x.exchanged, j * part + x.part_rows[j], part - x.part_rows[j]);
    const TensorView reduced = x.reduced.rows(0, part);
    g.etp->reduce_scatter(flat(reduced), flat(x.exchanged.rows(0, l.etp * part)), ReduceOp::sum);
    back = reduced.rows(0, x.part_rows[me]);
  }
  exchange_counts(l, g, s, x);
  all_to_all(g.ep, flat(permuted), x.send_counts, flat(back), x.recv_counts);
}

// The per-expert counts of every source, exchanged on the host with each source's bound check
// (one flag per chunk), so a bad routing map fails on every rank alike; fills saved.chunk_rows,
// sent_rows, tokens_per_expert and num_rows.
void exchange_routes(const Layout& l, const ExpertParallel& g, ExpertDispatchSaved& s, ExpertDispatchScratch& x,
                     const int64_t* routes, const char* op) {
  const int64_t stride = l.El + 1;
  const int32_t ok = route_bound_error(l, routes).empty() ? 1 : 0;
  for (int64_t i = 0; i < l.ep; ++i) {
    int64_t to_i = 0;
    for (int64_t e = 0; e < l.El; ++e) {
      const int64_t n = routes[i * l.El + e];
      x.count_send[i * stride + e] = static_cast<int32_t>(std::min<int64_t>(n, INT32_MAX));
      to_i += n;
    }
    x.count_send[i * stride + l.El] = ok;
    s.sent_rows[i] = to_i;
  }
  std::vector<int64_t>& per_peer = x.send_counts;  // stride counts each way (exchange_counts rewrites it)
  std::fill(per_peer.begin(), per_peer.end(), stride);
  const TensorView send(x.count_send.data(), DType::i32, {l.ep * stride});
  const TensorView recv(x.count_recv.data(), DType::i32, {l.ep * stride});
  const TensorView all(x.count_all.data(), DType::i32, {l.etp * l.ep * stride});
  if (l.etp > 1) {
    all_to_all(g.ep, recv, per_peer, send, per_peer);
    g.etp->all_gather(all, recv);
  } else {
    all_to_all(g.ep, all, per_peer, send, per_peer);
  }
  for (int64_t j = 0; j < l.etp; ++j)
    for (int64_t src = 0; src < l.ep; ++src) {
      if (x.count_all[(j * l.ep + src) * stride + l.El] != 0) continue;
      const std::string who = "the rank at (etp " + std::to_string(j) + ", ep " + std::to_string(src) + ")";
      if (j == g.etp_rank() && src == g.ep_rank()) fail_bounds(who, route_bound_error(l, routes), op);
      fail_bounds(who, "more rows than the bounds A = " + std::to_string(l.A) + " per ep rank, L_max = " +
                           std::to_string(l.L_max) + " in all,", op);
    }
  std::fill(s.tokens_per_expert.begin(), s.tokens_per_expert.end(), 0);
  s.num_rows = 0;
  for (int64_t c = 0; c < l.etp * l.ep; ++c)
    for (int64_t e = 0; e < l.El; ++e) {
      const int64_t n = x.count_all[c * stride + e];
      s.chunk_rows[c * l.El + e] = n;
      s.tokens_per_expert[e] += static_cast<int32_t>(n);
      s.num_rows += n;
    }
}

// ---- allgather: the local experts' columns of the gathered map ----

// Zero the map columns of other ep ranks' experts (the permutation then holds only local rows).
void keep_local_columns(const Layout& l, const TensorView& map, int64_t first) {
  Backend& backend = backend_for(map.device);
  auto* m = static_cast<char*>(map.data);
  for (int64_t t = 0; t < map.dim(0); ++t) {
    if (first > 0) backend.memset_zero(m + t * l.E, static_cast<size_t>(first));
    const int64_t end = first + l.El;
    if (end < l.E) backend.memset_zero(m + t * l.E + end, static_cast<size_t>(l.E - end));
  }
}

}  // namespace

int64_t expert_dispatch_max_rows(const ExpertDispatchOptions& options, const ExpertParallel& groups) {
  return layout_of(options, groups, "expert_dispatch_max_rows").R_max;
}

ExpertDispatchSaved alloc_expert_dispatch_saved(Arena& arena, const ExpertDispatchOptions& options,
                                                const ExpertParallel& groups) {
  const Layout l = layout_of(options, groups, "alloc_expert_dispatch_saved");
  ExpertDispatchSaved s;
  s.rows = arena.alloc(DType::f32, {l.R_max, l.h});
  s.probs = arena.alloc(DType::f32, {l.w(), l.E});
  s.row_token = arena.alloc(DType::i32, {l.p_max()});
  s.permuted_counts = arena.alloc(DType::i32, {l.E});
  s.combined = arena.alloc(DType::f32, {l.p_max(), l.h});
  s.tokens_per_expert.assign(static_cast<size_t>(l.El), 0);
  if (l.exchange) {
    s.chunk_rows.assign(static_cast<size_t>(l.G * l.El), 0);
    s.sent_rows.assign(static_cast<size_t>(l.ep), 0);
  }
  return s;
}

ExpertDispatchScratch alloc_expert_dispatch_scratch(Arena& arena, const ExpertDispatchOptions& options,
                                                    const ExpertParallel& groups) {
  const Layout l = layout_of(options, groups, "alloc_expert_dispatch_scratch");
  ExpertDispatchScratch x;
  x.routes.assign(static_cast<size_t>(l.E), 0);
  x.host_map.assign(static_cast<size_t>(l.w() * l.E), 0);
  if (l.exchange) {
    x.permuted = arena.alloc(DType::f32, {l.L_max, l.h});
    x.exchanged = arena.alloc(DType::f32, {l.R_max, l.h});
    if (l.etp > 1) x.reduced = arena.alloc(DType::f32, {l.ep * l.A, l.h});
    const auto stride = static_cast<size_t>(l.El + 1);
    x.count_send.assign(static_cast<size_t>(l.ep) * stride, 0);
    x.count_recv.assign(static_cast<size_t>(l.ep) * stride, 0);
    x.count_all.assign(static_cast<size_t>(l.G) * stride, 0);
    x.send_counts.assign(static_cast<size_t>(l.ep), 0);
    x.recv_counts.assign(static_cast<size_t>(l.ep), 0);
    x.part_rows.assign(static_cast<size_t>(l.etp), 0);
  } else if (l.G > 1) {
    x.gathered = arena.alloc(DType::f32, {l.G * l.T, l.h});
    x.gathered_map = arena.alloc(DType::u8, {l.G * l.T, l.E});
    x.dprobs = arena.alloc(DType::f32, {l.G * l.T, l.E});
    x.reduced_rows = arena.alloc(DType::f32, {l.T * std::max(l.h, l.E)});
  }
  return x;
}

void expert_dispatch_fwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                         ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch, const TensorView& tokens,
                         const TensorView& routing_probs, const TensorView& routing_map) {
  const char* op = "expert_dispatch_fwd";
  const Layout l = layout_of(options, groups, op);
  check_buffers(l, saved, scratch, op);
  check_f32(tokens, l.T, l.h, op, "tokens");
  check_f32(routing_probs, l.T, l.E, op, "routing_probs");
  check_dtype(routing_map, DType::u8, op, "routing_map");
  check_shape(routing_map, {l.T, l.E}, op, "routing_map");
  int64_t* routes = scratch.routes.data();

  if (l.exchange) {
    count_routes(routing_map, 0, l.T, l.E, scratch.host_map, routes);
    exchange_routes(l, groups, saved, scratch, routes, op);
    int64_t rows = 0;
    for (int64_t e = 0; e < l.E; ++e) rows += routes[e];
    saved.permuted_rows = rows;
    const TensorView permuted = scratch.permuted.rows(0, rows);
    moe_permute_fwd(permuted, saved.row_token.rows(0, rows), saved.permuted_counts, tokens, routing_map);
    copy_tensor(saved.probs, routing_probs);
    send_rows(l, groups, saved, scratch, saved.expert_rows(), permuted);
    return;
  }

  // allgather (and G = 1): every source's tokens, map and probs on every rank of etp × ep.
  TensorView all_tokens = tokens, map = routing_map;
  if (l.G > 1) {
    groups.etp_ep->all_gather(scratch.gathered, tokens);
    groups.etp_ep->all_gather(scratch.gathered_map, routing_map);
    groups.etp_ep->all_gather(saved.probs, routing_probs);
    all_tokens = scratch.gathered, map = scratch.gathered_map;
  } else {
    copy_tensor(saved.probs, routing_probs);
  }
  // Every rank checks every source alike, so all fail together.
  const int64_t first = groups.ep_rank() * l.El;
  std::fill(saved.tokens_per_expert.begin(), saved.tokens_per_expert.end(), 0);
  saved.num_rows = 0;
  for (int64_t src = 0; src < l.G; ++src) {
    count_routes(map, src * l.T, l.T, l.E, scratch.host_map, routes);
    const std::string error = route_bound_error(l, routes);
    if (!error.empty()) fail_bounds("rank " + std::to_string(src) + " of the etp × ep group", error, op);
    for (int64_t e = 0; e < l.El; ++e) saved.tokens_per_expert[e] += static_cast<int32_t>(routes[first + e]);
  }
  for (int32_t n : saved.tokens_per_expert) saved.num_rows += n;
  saved.permuted_rows = saved.num_rows;
  if (l.ep > 1) keep_local_columns(l, map, first);
  moe_permute_fwd(saved.expert_rows(), saved.row_token.rows(0, saved.num_rows), saved.permuted_counts, all_tokens,
                  map);
}

void expert_combine_fwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                        ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch, const TensorView& out,
                        const TensorView& expert_out) {
  const char* op = "expert_combine_fwd";
  const Layout l = layout_of(options, groups, op);
  check_buffers(l, saved, scratch, op);
  check_f32(out, l.T, l.h, op, "out");
  check_f32(expert_out, saved.num_rows, l.h, op, "expert_out (the experts' output for saved.expert_rows())");
  const int64_t p = saved.permuted_rows;
  const TensorView combined = saved.combined.rows(0, p), row_token = saved.row_token.rows(0, p);
  if (l.exchange) {
    return_rows(l, groups, saved, scratch, combined, expert_out);
    moe_unpermute_fwd(out, combined, row_token, saved.permuted_counts, saved.probs);
    return;
  }
  copy_tensor(combined, expert_out);
  if (l.G == 1) return moe_unpermute_fwd(out, combined, row_token, saved.permuted_counts, saved.probs);
  // Partial outputs of every source's tokens, summed over etp × ep into this rank's tokens.
  moe_unpermute_fwd(scratch.gathered, combined, row_token, saved.permuted_counts, saved.probs);
  groups.etp_ep->reduce_scatter(out, scratch.gathered, ReduceOp::sum);
}

void expert_combine_bwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                        const ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch,
                        const TensorView& dexpert_out, const TensorView& drouting_probs, const TensorView& dout) {
  const char* op = "expert_combine_bwd";
  const Layout l = layout_of(options, groups, op);
  check_buffers(l, saved, scratch, op);
  check_f32(dexpert_out, saved.num_rows, l.h, op, "dexpert_out");
  check_f32(drouting_probs, l.T, l.E, op, "drouting_probs");
  check_f32(dout, l.T, l.h, op, "dout");
  const int64_t p = saved.permuted_rows;
  const TensorView combined = saved.combined.rows(0, p), row_token = saved.row_token.rows(0, p);
  if (l.exchange) {
    const TensorView dpermuted = scratch.permuted.rows(0, p);
    zero(dpermuted);
    moe_unpermute_bwd(dpermuted, drouting_probs, dout, combined, row_token, saved.permuted_counts, saved.probs);
    send_rows(l, groups, saved, scratch, dexpert_out, dpermuted);
    return;
  }
  zero(dexpert_out);
  if (l.G == 1) {
    moe_unpermute_bwd(dexpert_out, drouting_probs, dout, combined, row_token, saved.permuted_counts, saved.probs);
    return;
  }
  groups.etp_ep->all_gather(scratch.gathered, dout);
  zero(scratch.dprobs);
  moe_unpermute_bwd(dexpert_out, scratch.dprobs, scratch.gathered, combined, row_token, saved.permuted_counts,
                    saved.probs);
  // Each source's probs get the sum of every rank's part (local experts' columns, etp partials).
  const TensorView dprobs_mine = scratch.reduced_rows.rows(0, l.T * l.E).reshape({l.T, l.E});
  groups.etp_ep->reduce_scatter(dprobs_mine, scratch.dprobs, ReduceOp::sum);
  accumulate(drouting_probs, dprobs_mine);
}

void expert_dispatch_bwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                         const ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch, const TensorView& dtokens,
                         const TensorView& dexpert_rows) {
  const char* op = "expert_dispatch_bwd";
  const Layout l = layout_of(options, groups, op);
  check_buffers(l, saved, scratch, op);
  check_f32(dtokens, l.T, l.h, op, "dtokens");
  check_f32(dexpert_rows, saved.num_rows, l.h, op, "dexpert_rows");
  const int64_t p = saved.permuted_rows;
  const TensorView row_token = saved.row_token.rows(0, p);
  if (l.exchange) {
    const TensorView dpermuted = scratch.permuted.rows(0, p);
    return_rows(l, groups, saved, scratch, dpermuted, dexpert_rows);
    moe_permute_bwd(dtokens, dpermuted, row_token);
    return;
  }
  if (l.G == 1) return moe_permute_bwd(dtokens, dexpert_rows, row_token);
  zero(scratch.gathered);
  moe_permute_bwd(scratch.gathered, dexpert_rows, row_token);
  const TensorView dtokens_mine = scratch.reduced_rows.rows(0, l.T * l.h).reshape({l.T, l.h});
  groups.etp_ep->reduce_scatter(dtokens_mine, scratch.gathered, ReduceOp::sum);
  accumulate(dtokens, dtokens_mine);
}

}  // namespace mt
