// Owns Megatron's MoE token dispatchers (megatron/core/transformer/moe/token_dispatcher.py,
// --moe-token-dispatcher-type allgather | alltoall) as explicit forward/backward functions around
// the experts: dispatch moves this rank's routed tokens to the ranks owning their experts, combine
// brings the experts' outputs back and weights them with the routing probabilities. An MoE block
// runs, per layer and micro-batch:
//
//   expert_dispatch_fwd(tokens, routing_probs, routing_map) → saved.expert_rows(), expert_counts()
//   moe_experts_fwd(expert_out, ..., saved.expert_rows(), saved.expert_counts(), weight1, weight2)
//   expert_combine_fwd(expert_out) → out
//   ...
//   expert_combine_bwd(dout) → dexpert_out, drouting_probs +=
//   moe_experts_bwd(dexpert_rows, dweight1, dweight2, dexpert_out, saved.expert_rows(), ...)
//   expert_dispatch_bwd(dexpert_rows) → dtokens +=
//
// Layouts (ops/moe_router.h, ops/moe_experts.h): T tokens on this rank, tokens [T, h] f32,
// routing_probs f32 [T, E] and routing_map u8 [T, E] over all E experts from moe_routing_map_fwd
// (capacity, when set, is applied there, per rank over its own T tokens, as Megatron's router does).
// Groups (ExpertParallel): ep ranks own E_l = E/ep experts each, ep rank i experts [i·E_l, (i+1)·E_l);
// etp ranks split each expert's weights (fc1 column-, fc2 row-parallel), so an etp rank's expert
// output is a partial sum the combine adds over etp. G = ep·etp.
//
// On the experts' side the rows of local expert l are contiguous, l ascending, expert_counts()[l]
// rows each (tokens_per_expert of ops/moe_experts.h over E_l experts).
//   alltoall: permute locally by expert (all E), all_to_all_v over ep with the per-expert counts
//     (exchanged first, on the host), all-gather over etp, then sort the chunks from (etp source,
//     ep source, local expert) order to (local expert, etp source, ep source) (Megatron's
//     sort_chunks_by_idxs), so expert l's rows come from etp rank 0's ep sources 0.., then etp rank 1's...
//     Combine reverses it: unsort, reduce-scatter over etp (sums the partial outputs), all_to_all_v
//     back, unpermute with routing_probs on the source rank.
//   allgather: all-gather tokens, routing_map and routing_probs over etp×ep (the etp_ep group, in its
//     rank order), keep the local experts' columns of the map, permute; combine unpermutes with the
//     gathered probs into partial outputs [G·T, h] and reduce-scatters them over etp×ep to [T, h].
//   G = 1 (either type): permute → experts → unpermute, no communication, bit for bit the ops.
// The etp all-gather / reduce-scatter of the alltoall dispatcher moves equal parts: each etp rank's
// rows padded to the largest count of the group (Megatron moves uneven parts); the padding is
// zeros and is never read, so results are those of the uneven exchange.
//
// Communication per call (G > 1; with a size-1 ep or etp group that step is a local copy or none):
//   alltoall  dispatch_fwd: all_to_all_v of ep·(E_l+1) i32 counts over ep and their all-gather over
//             etp (host), all_to_all_v of the rows over ep, all-gather over etp;
//             combine_fwd: reduce-scatter over etp, all_to_all_v over ep; combine_bwd: as
//             dispatch_fwd without the counts; dispatch_bwd: as combine_fwd.
//   allgather dispatch_fwd: three all-gathers over etp×ep (tokens, map, probs); combine_fwd: one
//             reduce-scatter; combine_bwd: all-gather of dout, reduce-scatter of the probs' gradient
//             [G·T, E]; dispatch_bwd: one reduce-scatter.
//
// Worst-case rows (buffers are carved at start-up at these sizes; the actual counts are reported).
// With C = moe_expert_capacity(T, E, k, factor) and Cm = min(C, T) (a padded expert holds exactly
// Cm of a rank's tokens, a dropping one at most Cm):
//   rows one source rank routes to one ep rank's experts
//     A = T·min(k, E_l)                          dropless
//       = min(T·min(k, E_l), E_l·Cm)             capacity factor, dropping
//       = E_l·Cm                                 pad to capacity
//   rows this rank's experts receive (both dispatchers): R_max = G·A
//   rows of a rank's own permutation (alltoall): L_max = T·k, min(T·k, E·Cm), E·Cm (same three cases)
// A routing map beyond these bounds (not made with these options) is an mt::Error on every rank of
// the group alike (the bounds travel with the count exchange or are checked on the gathered map),
// never a hang.
//
// Memory (DESIGN invariant 3): ExpertDispatchSaved is what one micro-batch keeps from its forward to
// its backward; ExpertDispatchScratch is dead between calls, so layers may share one. Both come from
// alloc_* at their worst case; a measuring Arena sizes them for the memory planner. Host-side counts
// are std::vectors sized there too, so no call allocates.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/arena.h"
#include "backend/moe_router_args.h"  // MoeCapacityOptions
#include "comm/communicator.h"

namespace mt {

enum class MoeDispatcherType : uint8_t { allgather, alltoall };  // --moe-token-dispatcher-type

// This rank's expert groups (ProcessGroups::ep, etp, etp_ep); a null communicator is a group of
// one, so ExpertParallel{} is a single rank. The allgather dispatcher needs etp_ep when G > 1; the
// alltoall one uses ep and etp only.
struct ExpertParallel {
  Communicator* ep = nullptr;
  Communicator* etp = nullptr;
  Communicator* etp_ep = nullptr;
  // The group sizes where there are no communicators (sizing buffers for the planner).
  int ep_ranks = 1, etp_ranks = 1;

  int ep_size() const { return ep ? ep->size() : ep_ranks; }
  int ep_rank() const { return ep ? ep->rank() : 0; }
  int etp_size() const { return etp ? etp->size() : etp_ranks; }
  int etp_rank() const { return etp ? etp->rank() : 0; }
};

struct ExpertDispatchOptions {
  MoeDispatcherType type = MoeDispatcherType::allgather;  // --moe-token-dispatcher-type (Megatron's default)
  int64_t num_experts = 0;                                // --num-experts: E, over all ranks
  int64_t topk = 0;                                       // --moe-router-topk: k
  // --moe-expert-capacity-factor, --moe-token-drop-policy, --moe-pad-expert-input-to-capacity: only
  // the bounds use them (the routing map already holds their effect).
  MoeCapacityOptions capacity;
  int64_t tokens = 0;  // T: tokens of this rank (s/tp·b as the router sees them); equal on every rank
  int64_t hidden = 0;  // h
};

// R_max above: rows this rank's experts may receive (size the experts' buffers with it: their
// output, pre-activation and the two row gradients).
int64_t expert_dispatch_max_rows(const ExpertDispatchOptions& options, const ExpertParallel& groups);

// Kept from a micro-batch's forward to its backward. P = the rows of the permutation combined on
// this rank: alltoall (G > 1) this rank's own routed rows (≤ L_max); otherwise the rows of the local
// experts (≤ R_max). W = T (alltoall) or G·T (allgather: the gathered tokens).
//   bytes = 4·(R_max·h + W·E + P_max + E + P_max·h), plus host counts (E_l·4, alltoall + (G·E_l + ep)·8)
struct ExpertDispatchSaved {
  TensorView rows;                          // f32 [R_max, h]: the experts' input; the first num_rows are valid
  std::vector<int32_t> tokens_per_expert;   // [E_l], host: rows per local expert, Σ = num_rows
  int64_t num_rows = 0;
  TensorView probs;                         // f32 [W, E]: routing_probs (gathered for allgather): the combine weights
  TensorView row_token;                     // i32 [P_max]: the token (of the W) of each permuted row
  TensorView permuted_counts;               // i32 [E]: rows per expert of that permutation
  TensorView combined;                      // f32 [P_max, h]: the rows the combine weighted (for drouting_probs)
  int64_t permuted_rows = 0;                // P
  std::vector<int64_t> chunk_rows;          // alltoall, G > 1: [etp, ep, E_l] rows from (etp j, ep s) to expert l
  std::vector<int64_t> sent_rows;           // alltoall, G > 1: [ep] rows this rank sent to each ep rank

  TensorView expert_rows() const { return rows.rows(0, num_rows); }
  // i32 [E_l] on the host (moe_experts_fwd/bwd's tokens_per_expert).
  TensorView expert_counts() {
    return TensorView(tokens_per_expert.data(), DType::i32, {static_cast<int64_t>(tokens_per_expert.size())});
  }
};

// Dead between calls (layers may share one). Views are empty where the layout needs none (G = 1).
//   bytes = 4·(L_max + R_max + [etp > 1]·ep·A)·h              alltoall, G > 1
//         = 4·G·T·h + 5·G·T·E + 4·T·max(h, E)                allgather, G > 1
struct ExpertDispatchScratch {
  std::vector<int64_t> routes;  // [E], host: one source's rows per expert
  std::vector<uint8_t> host_map;  // [W·E], host: the routing map read there when it lives on a device
  // alltoall, G > 1
  TensorView permuted;   // f32 [L_max, h]: this rank's permuted rows, then their gradient
  TensorView exchanged;  // f32 [R_max, h]: rows after the ep exchange, etp parts padded to the largest
  TensorView reduced;    // f32 [ep·A, h] (etp > 1): the reduce-scatter's part
  std::vector<int32_t> count_send, count_recv, count_all;  // [ep·(E_l+1)], [ep·(E_l+1)], [etp·ep·(E_l+1)]
  std::vector<int64_t> send_counts, recv_counts;           // [ep] elements per peer of all_to_all_v
  std::vector<int64_t> part_rows;                          // [etp] rows each etp rank received
  // allgather, G > 1
  TensorView gathered;      // f32 [G·T, h]: tokens, partial outputs, their gradients
  TensorView gathered_map;  // u8 [G·T, E]
  TensorView dprobs;        // f32 [G·T, E]
  TensorView reduced_rows;  // f32 [T·max(h, E)]: this rank's part of a reduce-scatter
};

// Carve the buffers (a measuring arena only counts). Checks the options and groups (E divisible by
// ep, k in [1, E], the allgather's etp_ep of size ep·etp); the checks use values every rank shares.
ExpertDispatchSaved alloc_expert_dispatch_saved(Arena& arena, const ExpertDispatchOptions& options,
                                                const ExpertParallel& groups);
ExpertDispatchScratch alloc_expert_dispatch_scratch(Arena& arena, const ExpertDispatchOptions& options,
                                                    const ExpertParallel& groups);

// Forward. Dispatch: saved.expert_rows() [num_rows, h] = this rank's experts' rows (see above),
// saved.tokens_per_expert their counts; saves routing_probs (gathered for allgather) and the
// permutation. Reads the routing map on the host (a device's map through scratch.host_map).
// Collective over the groups.
void expert_dispatch_fwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                         ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch, const TensorView& tokens,
                         const TensorView& routing_probs, const TensorView& routing_map);
// Combine: out [T, h] (overwritten) = Σ_{e: routing_map[t, e]} routing_probs[t, e] · y_e(t), where
// y_e(t) = Σ over etp of expert e's (partial) output row for token t, expert_out [num_rows, h] in
// saved.rows' order. A token without rows gets 0. Keeps the combined rows in saved.combined.
void expert_combine_fwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                        ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch, const TensorView& out,
                        const TensorView& expert_out);

// Backward. Combine: dexpert_out [num_rows, h] (overwritten) = routing_probs[t, e] · dout[t] for each
// expert row (the same on every etp rank), and drouting_probs [T, E] += Σ_c y_e(t)[c] · dout[t, c]
// for each routed (t, e) (through the etp sum). dout [T, h].
void expert_combine_bwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                        const ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch,
                        const TensorView& dexpert_out, const TensorView& drouting_probs, const TensorView& dout);
// Dispatch: dtokens [T, h] += Σ over token t's expert rows of dexpert_rows (summed over etp: each etp
// rank's rows feed its own weight shard). dexpert_rows [num_rows, h].
void expert_dispatch_bwd(const ExpertDispatchOptions& options, const ExpertParallel& groups,
                         const ExpertDispatchSaved& saved, ExpertDispatchScratch& scratch, const TensorView& dtokens,
                         const TensorView& dexpert_rows);

}  // namespace mt
