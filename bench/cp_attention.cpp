// bench/cp_attention: context-parallel attention (forward + backward) over the job's ranks as the
// cp group, against the unsplit attention of the whole sequence on one rank, and how much of the
// p2p ring's communication hides behind its blocks' attention. Run under mpirun (one thread per
// rank), e.g.
//   OMP_NUM_THREADS=1 mpirun -np 2 build/bench/cp_attention [--seq S] [--rounds R]
// Each round times, medians over the rounds:
//   whole     the unsplit attention of S tokens on rank 0 alone (the others wait);
//   p2p, a2a, allgather   cp_attention_fwd + _bwd of each comm type, every rank its S/cp tokens;
//   compute   the ring's block attentions and merges without sending anything;
//   comm      the ring's sends and receives alone (K, V blocks and the backward's dK, dV).
// and prints each comm type's speed-up over `whole` (ideal: cp) and
//   hidden = (compute + comm − p2p) / comm,
// the share of the ring's communication its overlap took off the step. A benchmark: it never
// fails on time. Rank 0 prints.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "median.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "parallel/context_parallel.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kB = 1, kN = 8, kG = 8, kD = 64;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Buffer {
  std::vector<float> data;
  mt::TensorView view;
  explicit Buffer(mt::Shape shape, float value = 0.0f) : data(static_cast<size_t>(shape.numel()), value) {
    view = mt::TensorView(data.data(), mt::DType::f32, shape);
  }
};

void fill(Buffer& b, uint64_t seed) {
  mt::RngStream rng{seed, 3};
  for (size_t i = 0; i < b.data.size(); ++i) b.data[i] = 0.5f * rng.normal(i);
}

mt::AttentionOptions options() {
  mt::AttentionOptions o;
  o.scale = 1.0f / 8.0f;
  return o;
}

// Forward + backward of one attention of q [b, n, s, d] over k, v, with its own buffers.
struct Attention {
  Buffer q, k, v, out, lse, dout, dq, dk, dv, ws;
  explicit Attention(int64_t s, int64_t keys = 0)
      : q({kB, kN, s, kD}), k({kB, kG, keys ? keys : s, kD}), v({kB, kG, keys ? keys : s, kD}),
        out({s, kB, kN * kD}), lse({kB, kN, s}), dout({s, kB, kN * kD}), dq({kB, kN, s, kD}),
        dk({kB, kG, keys ? keys : s, kD}), dv({kB, kG, keys ? keys : s, kD}),
        ws({static_cast<int64_t>(mt::attention_workspace_floats(kB, kN, std::max(s, keys), kD, 1))}) {
    fill(q, 1);
    fill(k, 2);
    fill(v, 3);
    fill(dout, 4);
  }
};

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  int64_t seq = 4096;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seq") && i + 1 < argc) seq = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: cp_attention [--seq S] [--rounds R]\n");
      return 2;
    }
  }
  std::unique_ptr<mt::Communicator> world = mt::make_mpi_world_communicator();
  const int cp = world->size(), rank = world->rank();
  if (cp < 2 || seq % (2 * cp)) {
    if (rank == 0) std::fprintf(stderr, "cp_attention: run on 2 or more ranks with --seq divisible by 2 x ranks\n");
    return 2;
  }
  const int64_t sl = seq / cp;
  Attention local(sl);
  std::vector<double> whole, compute, comm;
  std::vector<std::vector<double>> by_type(3);
  const mt::CpCommType types[] = {mt::CpCommType::p2p, mt::CpCommType::a2a, mt::CpCommType::allgather};
  for (int r = 0; r < rounds; ++r) {
    // The unsplit attention on rank 0.
    world->barrier();
    if (rank == 0) {
      Attention all(seq);
      const auto t0 = Clock::now();
      mt::attention_fwd(all.out.view, all.lse.view, all.q.view, all.k.view, all.v.view, options());
      mt::attention_bwd(all.dq.view, all.dk.view, all.dv.view, all.dout.view, all.out.view, all.lse.view, all.q.view,
                        all.k.view, all.v.view, options(), all.ws.view);
      whole.push_back(seconds_since(t0));
    }
    // Each comm type over the job.
    for (int t = 0; t < 3; ++t) {
      const mt::ContextParallel ctx{world.get(), types[t]};
      Buffer scratch({static_cast<int64_t>(mt::cp_attention_scratch_floats(types[t], cp, kB, kN, kG, sl, kD, 1))});
      world->barrier();
      const auto t0 = Clock::now();
      mt::cp_attention_fwd(ctx, local.out.view, local.lse.view, local.q.view, local.k.view, local.v.view, options(),
                           scratch.view);
      mt::cp_attention_bwd(ctx, local.dq.view, local.dk.view, local.dv.view, local.dout.view, local.out.view,
                           local.lse.view, local.q.view, local.k.view, local.v.view, options(), scratch.view);
      world->barrier();
      by_type[static_cast<size_t>(t)].push_back(seconds_since(t0));
    }
    // The ring's work without its messages: every step's block attention (and merge), forward and
    // backward, on the blocks this rank would hold.
    {
      const mt::SeqRows mine = mt::ContextParallel::rows_of(rank, cp, sl);
      Buffer part({sl, kB, kN * kD}), part_lse({kB, kN, sl}), dk({kB, kG, sl, kD}), dv({kB, kG, sl, kD});
      world->barrier();
      const auto t0 = Clock::now();
      for (int step = 0; step < cp; ++step) {
        mt::AttentionOptions o = options();
        o.q_rows = mine;
        o.k_rows = mt::ContextParallel::rows_of((rank - step + cp) % cp, cp, sl);
        o.seq_length = seq;
        mt::attention_fwd(part.view, part_lse.view, local.q.view, local.k.view, local.v.view, o);
        if (step > 0) mt::attention_merge(local.out.view, local.lse.view, part.view, part_lse.view);
      }
      for (int step = 0; step < cp; ++step) {
        mt::AttentionOptions o = options();
        o.q_rows = mine;
        o.k_rows = mt::ContextParallel::rows_of((rank - step + cp) % cp, cp, sl);
        o.seq_length = seq;
        mt::attention_bwd(local.dq.view, dk.view, dv.view, local.dout.view, local.out.view, local.lse.view,
                          local.q.view, local.k.view, local.v.view, o, local.ws.view);
      }
      world->barrier();
      compute.push_back(seconds_since(t0));
    }
    // The ring's messages alone: cp − 1 K and V blocks each way twice, cp dK and dV.
    {
      const int next = (rank + 1) % cp, prev = (rank + cp - 1) % cp;
      Buffer in({kB, kG, sl, kD});
      const int blocks = 2 * (cp - 1) + 2 * (cp - 1) + 2 * cp;
      world->barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < blocks; ++i) {
        auto recv = world->recv_async(in.view, prev, 0);
        auto send = world->send_async(local.k.view, next, 0);
        recv->wait();
        send->wait();
      }
      world->barrier();
      comm.push_back(seconds_since(t0));
    }
  }
  if (rank == 0) {
    const double w = median(whole), c = median(compute), m = median(comm);
    std::printf("cp_attention: %d ranks (one thread each), b %lld, heads %lld, groups %lld, head dim %lld, sequence "
                "%lld (%lld per rank); forward + backward, medians of %d rounds\n",
                cp, static_cast<long long>(kB), static_cast<long long>(kN), static_cast<long long>(kG),
                static_cast<long long>(kD), static_cast<long long>(seq), static_cast<long long>(sl), rounds);
    std::printf("whole sequence on one rank %.1f ms\n", w * 1e3);
    for (int t = 0; t < 3; ++t) {
      const double s = median(by_type[static_cast<size_t>(t)]);
      std::printf("%-9s %.1f ms  speed-up %.2fx (ideal %d)\n", mt::cp_comm_type_name(types[t]), s * 1e3, w / s, cp);
    }
    const double ring = median(by_type[0]);
    std::printf("ring compute alone %.1f ms | ring messages alone %.1f ms | hidden %.0f%% of the messages\n", c * 1e3,
                m * 1e3, 100.0 * (c + m - ring) / m);
  }
  return 0;
}
