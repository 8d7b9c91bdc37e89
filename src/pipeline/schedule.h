// Owns the pipeline schedules as generated action lists, one per pipeline rank: no pipelining,
// 1F1B, interleaved 1F1B and forward-only, with Megatron's compute order
// (megatron/core/pipeline_parallel/schedules.py: forward_backward_no_pipelining,
// forward_backward_pipelining_without_interleaving, forward_backward_pipelining_with_interleaving,
// get_pp_rank_microbatches, get_schedule_table).
//
// Compute order on rank r (m micro-batches, v chunks, groups of G micro-batches):
//   no pipelining (pp = 1): F0 B0 F1 B1 ...
//   1F1B (v = 1): W = min(pp - r - 1, m) forwards, then (F, B) pairs, then the remaining B.
//   interleaved (v > 1): m·v virtual micro-batches k in table order: for each group of G
//     consecutive micro-batches, for each chunk 0..v-1, each micro-batch of the group. Forward k
//     is (table[k].mb, table[k].chunk); backward k is (table[k].mb, v - 1 - table[k].chunk).
//     W = min(2·(pp - r - 1) + (v - 1)·G, m·v) forwards, then (forward W + k, backward k) pairs,
//     then the remaining backwards. This is Megatron's rule since its tunable-schedule change
//     (commit 4295be1a6c); before it, m == pp made every rank all-warm-up, now only those whose
//     count reaches m·v (rank 0 among them).
//     Megatron also requires pp > 2 for interleaving unless --overlap-p2p-comm (two tensors
//     between the same two ranks in one batch); our transfers name their direction, so pp = 2
//     is allowed.
//   forward-only: every forward in the same order, no backward.
//
// Communication: between computes a rank runs Exchange actions, each a set of sends and receives
// that the executor posts all at once (non-blocking) and then waits for together, like Megatron's
// batched isend/irecv (send_forward_recv_backward etc.). The generator places the exchanges by
// running the compute orders in lock-step ticks (one compute per rank per tick): a tensor computed
// in tick t is sent in the sender's exchange of tick t and received in the receiver's exchange of
// tick t. So every exchange's partners sit in exchanges of the same tick and, by induction over
// ticks, a communicator whose send completes only once the receive is posted (rendezvous) cannot
// deadlock, whatever the real compute times. A receive may come well before the compute that needs
// it (rank 0 in interleaved receives wrap-around activations ahead); the executor buffers it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pipeline/partition.h"

namespace mt {

struct ScheduleConfig {
  int pp = 1;                // --pipeline-model-parallel-size
  int vp = 1;                // model chunks per rank (virtual_pipeline_size)
  int num_microbatches = 1;  // m: global batch / (micro batch · dp)
  // --microbatch-group-size-per-virtual-pipeline-stage; 0 = pp. Only interleaving uses it.
  int group_size = 0;
  bool forward_only = false;  // evaluation: forwards only

  int effective_group_size() const { return group_size > 0 ? group_size : pp; }
};

enum class ScheduleKind { no_pipelining, one_f_one_b, interleaved };

// Which schedule a config runs. Throws mt::Error on a config Megatron refuses: interleaving needs
// pp >= 2 and pp <= G <= m, and m mod G must be 0 or >= pp (else the last group stalls).
ScheduleKind schedule_kind(const ScheduleConfig& config);
const char* schedule_kind_name(ScheduleKind kind);

// Megatron's warm-up forward count on `rank` (get_pp_rank_microbatches): 0 without pipelining,
// min(pp - rank - 1, m) for 1F1B, min(2·(pp - rank - 1) + (v - 1)·G, m·v) interleaved, and every
// virtual micro-batch (m·v) when forward_only.
int warmup_microbatches(const ScheduleConfig& config, int rank);

// The tensors that cross ranks: activations flow to the next virtual stage, gradients (of a
// stage's input) to the previous one. Rank r's next virtual stage lives on rank (r + 1) mod pp
// (rank pp-1's chunk c feeds rank 0's chunk c + 1), its previous on rank (r - 1) mod pp.
enum class Direction { activation, gradient };
const char* direction_name(Direction direction);

// One send or receive of an Exchange: the peer rank, and the tensor's identity, (direction,
// micro-batch, virtual stage that produced it). The consumer is stage + 1 for an activation and
// stage - 1 for a gradient. Messages of one (source, destination, direction) match in FIFO order.
struct Transfer {
  int peer = 0;
  Direction direction = Direction::activation;
  int microbatch = 0;
  int stage = 0;  // virtual stage that computed the tensor

  int consumer_stage() const { return direction == Direction::activation ? stage + 1 : stage - 1; }
  bool operator==(const Transfer&) const = default;
};

struct Action {
  enum class Kind { forward, backward, exchange };
  Kind kind = Kind::forward;
  int microbatch = 0;           // forward / backward
  int chunk = 0;                // forward / backward: the model chunk on this rank
  std::vector<Transfer> sends;  // exchange: post all sends and receives, then wait for all
  std::vector<Transfer> recvs;

  static Action forward(int mb, int chunk) { return {Kind::forward, mb, chunk, {}, {}}; }
  static Action backward(int mb, int chunk) { return {Kind::backward, mb, chunk, {}, {}}; }
  static Action exchange(std::vector<Transfer> sends, std::vector<Transfer> recvs) {
    return {Kind::exchange, 0, 0, std::move(sends), std::move(recvs)};
  }
};

// "F(mb 3, chunk 1)", "B(...)", "X[send act mb 3 vs 5 -> rank 2; recv grad mb 1 vs 6 <- rank 2]".
std::string to_string(const Action& action);

struct Schedule {
  ScheduleConfig config;
  ScheduleKind kind = ScheduleKind::no_pipelining;
  std::vector<std::vector<Action>> ranks;  // [pp] action lists
};

// Generates every rank's action list. Throws mt::Error on an invalid config (see schedule_kind).
Schedule build_schedule(const ScheduleConfig& config);

// Per chunk, the most micro-batches one rank's list holds in flight at once (forward done,
// backward not yet): the activation slots its Stage of that chunk needs. A list without
// backwards (forward-only) needs none (Stage::forward_only keeps nothing): all zeros.
std::vector<int> max_in_flight(const std::vector<Action>& actions, int vp);

// The most received tensors one rank's list (of a pipeline of size pp) holds at once before the
// computes that consume them: the executor's receive buffers.
int max_buffered_receives(const std::vector<Action>& actions, int pp);

}  // namespace mt
