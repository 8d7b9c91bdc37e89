// Owns context parallelism's attention (Megatron's --context-parallel-size, --cp-comm-type). The
// sequence of S tokens is cut into 2·cp chunks of c = S/(2·cp); cp rank r holds chunks r and
// 2cp − 1 − r (Megatron's load-balanced get_batch_on_this_cp_rank, so every rank does the same
// causal work), and its sl = 2c rows are [chunk r; chunk 2cp − 1 − r]. Everything but attention is
// per token and needs nothing from the other ranks; attention exchanges keys and values:
//   p2p        ring attention: key/value blocks travel around the cp ring (async send/recv
//              overlapped with the block's attention), partial results merge by log-sum-exp; the
//              backward sends the blocks again, each with its dK/dV accumulator.
//   a2a        Ulysses: an all-to-all turns [sequence shard, all heads] into [whole sequence, 1/cp
//              of the heads], plain causal attention runs on that, and an all-to-all turns it back.
//   allgather  keys and values all-gathered, local queries attend; dK/dV reduce-scattered back.
// Each is a forward/backward pair over this rank's tensors (ops/attention.h's layouts):
//   q [b, n, sl, d], k and v [b, g, sl, d] after RoPE at this rank's positions; out [sl, b, n·d];
//   lse [b, n, sl] (p2p, allgather), or the inner attention's [b, n/cp, S] (a2a; the same size).
// Results equal the whole sequence's attention on one rank up to summation order, with the same
// dropout masks (drawn by global positions). Nothing is allocated: f32 scratch comes from the
// caller, cp_attention_scratch_floats of it. Communication moves f32.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "ops/attention.h"
#include "parallel/cp_comm_type.h"

namespace mt {

struct ContextParallel {
  Communicator* comm = nullptr;  // the cp group; null: size 1
  CpCommType comm_type = CpCommType::p2p;

  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool active() const { return size() > 1; }
  // Where this rank's `local` rows (local/2 per chunk) sit in the sequence of local·size() tokens
  // (the identity without context parallelism).
  SeqRows rows(int64_t local) const { return active() ? rows_of(rank(), size(), local) : SeqRows{}; }
  static SeqRows rows_of(int rank, int cp, int64_t local) {
    const int64_t c = local / 2;
    return SeqRows::runs(rank * c, c, (2 * cp - 1 - rank) * c);
  }
};

// f32 scratch elements cp_attention_fwd / _bwd need over cp ranks for q [b, n, sl, d], k [b, g,
// sl, d] with up to `threads` OpenMP threads (both directions fit in the larger amount); 0 for cp 1.
size_t cp_attention_scratch_floats(CpCommType type, int cp, int64_t b, int64_t n, int64_t g, int64_t sl, int64_t d,
                                   int threads, Device device = Device::cpu);

// Throws mt::Error naming the flags when the shapes cannot be split this way over cp ranks (sl
// odd; a2a with heads or query groups not divisible by cp).
void check_cp_attention(CpCommType type, int cp, int64_t n, int64_t g, int64_t sl);

// Whole sequences from their chunks, for what couples every token (Sinkhorn routing): x [sl, w]
// holds this rank's rows in [chunk r; chunk 2cp − 1 − r] order; whole [S, w] gets every rank's,
// in sequence order (raw: S·w floats of scratch). cp_take_rows is the way back: this rank's rows.
void cp_gather_sequence(const ContextParallel& cp, const TensorView& whole, const TensorView& x, const TensorView& raw);
void cp_take_rows(const ContextParallel& cp, const TensorView& x, const TensorView& whole);

// out, lse overwritten. options: scale, dropout and the head indexing as for the whole sequence;
// its positions (q_rows, k_rows, seq_length) are set here.
void cp_attention_fwd(const ContextParallel& cp, const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k, const TensorView& v, const AttentionOptions& options,
                      const TensorView& scratch);
// Accumulates dq, dk, dv (like q, k, v) from dout [sl, b, n·d], given the forward's out and lse.
void cp_attention_bwd(const ContextParallel& cp, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                      const TensorView& dout, const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k, const TensorView& v, const AttentionOptions& options,
                      const TensorView& scratch);

}  // namespace mt
