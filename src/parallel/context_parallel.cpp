// Context parallelism's attention: the p2p ring, the a2a (Ulysses) exchange and the all-gather
// of keys and values, forward and backward (context_parallel.h states the layouts).
#include "parallel/context_parallel.h"

#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"
#include "ops/elementwise.h"

namespace mt {

namespace {

// Hands out consecutive f32 views of the scratch; over a null base it only counts (the sizing).
class Carver {
 public:
  explicit Carver(const TensorView& scratch) : base_(scratch) {}
  TensorView take(Shape shape) {
    const int64_t n = shape.numel();
    TensorView t(base_.empty() ? nullptr : base_.f32() + used_, DType::f32, shape, base_.device);
    used_ += n;
    MT_CHECK(base_.empty() || used_ <= base_.numel())
        << "context-parallel attention: scratch of " << base_.numel() << " floats is too small (see "
        << "cp_attention_scratch_floats)";
    return t;
  }
  // The attention backward's workspace: `floats` when sizing; the rest of the scratch when carving
  // (attention_bwd runs as many threads as it holds).
  TensorView take_workspace(int64_t floats) {
    if (base_.empty()) return take({floats});
    return take({base_.numel() - used_});
  }
  int64_t used() const { return used_; }

 private:
  TensorView base_;
  int64_t used_ = 0;
};

// The sequence chunks of every rank: ranked [cp, outer, sl, inner] (rank q's rows as it holds
// them) <-> global [outer, S, inner] (rank q's first half is chunk q, its second chunk 2cp − 1 − q).
void ranked_to_global(const TensorView& global, const TensorView& ranked, int cp) {
  const int64_t outer = global.dim(0), sl = global.dim(1) / cp, c = sl / 2;
  const TensorView by_rank = ranked.reshape({cp, outer * sl * global.dim(2)});
  for (int q = 0; q < cp; ++q) {
    const TensorView part = by_rank.rows(q, 1).reshape({outer, sl, global.dim(2)});
    copy_row_block(global, q * c, part, 0, c);
    copy_row_block(global, (2 * cp - 1 - q) * c, part, c, c);
  }
}
void global_to_ranked(const TensorView& ranked, const TensorView& global, int cp) {
  const int64_t outer = global.dim(0), sl = global.dim(1) / cp, c = sl / 2;
  const TensorView by_rank = ranked.reshape({cp, outer * sl * global.dim(2)});
  for (int q = 0; q < cp; ++q) {
    const TensorView part = by_rank.rows(q, 1).reshape({outer, sl, global.dim(2)});
    copy_row_block(part, 0, global, q * c, c);
    copy_row_block(part, c, global, (2 * cp - 1 - q) * c, c);
  }
}

// Equal-sized personalised exchange: block q of `send` goes to rank q, block q of `recv` came from it.
void all_to_all(Communicator& comm, const TensorView& recv, const TensorView& send) {
  const std::vector<int64_t> counts(static_cast<size_t>(comm.size()), send.numel() / comm.size());
  comm.all_to_all_v(recv, counts, send, counts);
}

// x viewed as [outer, cp, inner] <-> by_rank [cp, outer, inner]: block q of every outer row is
// what rank q sends or sent (the first two dimensions transposed, one copy per rank).
void split_by_rank(const TensorView& by_rank, const TensorView& x, int cp, int64_t outer) {
  const int64_t inner = x.numel() / (outer * cp);
  const TensorView blocks = by_rank.reshape({cp, outer * inner});
  for (int q = 0; q < cp; ++q)
    copy_row_block(blocks.rows(q, 1).reshape({outer, 1, inner}), 0, x.reshape({outer, cp, inner}), q, 1);
}
void join_by_rank(const TensorView& x, const TensorView& by_rank, int cp, int64_t outer) {
  const int64_t inner = x.numel() / (outer * cp);
  const TensorView blocks = by_rank.reshape({cp, outer * inner});
  for (int q = 0; q < cp; ++q)
    copy_row_block(x.reshape({outer, cp, inner}), q, blocks.rows(q, 1).reshape({outer, 1, inner}), 0, 1);
}

// Head-major x [b, h, sl, d] (this rank's rows, every head) -> xh [b, h/cp, S, d] (every row, head
// block `rank`), and back (accumulating into x). send/recv (and tmp): b·h·sl·d floats each.
void seq_to_heads(Communicator& comm, const TensorView& xh, const TensorView& x, const TensorView& send,
                  const TensorView& recv) {
  const int cp = comm.size();
  split_by_rank(send, x, cp, x.dim(0));
  all_to_all(comm, recv, send);
  ranked_to_global(xh.reshape({xh.dim(0) * xh.dim(1), xh.dim(2), xh.dim(3)}), recv, cp);
}
void heads_to_seq_add(Communicator& comm, const TensorView& x, const TensorView& xh, const TensorView& send,
                      const TensorView& recv, const TensorView& tmp) {
  const int cp = comm.size();
  global_to_ranked(send, xh.reshape({xh.dim(0) * xh.dim(1), xh.dim(2), xh.dim(3)}), cp);
  all_to_all(comm, recv, send);
  join_by_rank(tmp, recv, cp, x.dim(0));
  accumulate(x, tmp);
}

// Sequence-major o [sl, b, n·d] (this rank's rows, every head) <-> oh [S, b, (n/cp)·d] (every row,
// head block `rank`).
void rows_to_heads(Communicator& comm, const TensorView& oh, const TensorView& o, const TensorView& send,
                   const TensorView& recv) {
  const int cp = comm.size();
  split_by_rank(send, o, cp, o.dim(0) * o.dim(1));
  all_to_all(comm, recv, send);
  ranked_to_global(oh.reshape({1, oh.dim(0), oh.dim(1) * oh.dim(2)}), recv, cp);
}
void heads_to_rows(Communicator& comm, const TensorView& o, const TensorView& oh, const TensorView& send,
                   const TensorView& recv) {
  const int cp = comm.size();
  global_to_ranked(send, oh.reshape({1, oh.dim(0), oh.dim(1) * oh.dim(2)}), cp);
  all_to_all(comm, recv, send);
  join_by_rank(o, recv, cp, o.dim(0) * o.dim(1));
}

struct Dims {
  int64_t b, n, g, sl, d;
  Dims(const TensorView& q, const TensorView& k) : b(q.dim(0)), n(q.dim(1)), g(k.dim(1)), sl(q.dim(2)), d(q.dim(3)) {}
  Dims(int64_t b_, int64_t n_, int64_t g_, int64_t sl_, int64_t d_) : b(b_), n(n_), g(g_), sl(sl_), d(d_) {}
};

AttentionOptions at_positions(const AttentionOptions& o, const SeqRows& q_rows, const SeqRows& k_rows, int64_t s) {
  AttentionOptions r = o;
  r.q_rows = q_rows;
  r.k_rows = k_rows;
  r.seq_length = s;
  return r;
}

// ---- allgather -----------------------------------------------------------------------------------

struct GatherScratch {
  TensorView raw, kg, vg;             // [cp, b·g, sl, d], [b, g, S, d] x2
  TensorView dkg, dvg, part, ws;      // backward: like kg, vg; [b, g, sl, d]; the attention's workspace
  GatherScratch(Carver& c, const Dims& m, int cp, bool backward, Device device, int threads) {
    const int64_t s = m.sl * cp;
    raw = c.take({cp, m.b * m.g, m.sl, m.d});
    kg = c.take({m.b, m.g, s, m.d});
    vg = c.take({m.b, m.g, s, m.d});
    if (!backward) return;
    dkg = c.take(kg.shape);
    dvg = c.take(vg.shape);
    part = c.take({m.b, m.g, m.sl, m.d});
    ws = c.take_workspace(static_cast<int64_t>(attention_workspace_floats(m.b, m.n, s, m.d, threads, device)));
  }
};

void gather_kv(Communicator& comm, const GatherScratch& g, const TensorView& k, const TensorView& v) {
  const int64_t bg = k.dim(0) * k.dim(1);
  comm.all_gather(g.raw, k);
  ranked_to_global(g.kg.reshape({bg, g.kg.dim(2), g.kg.dim(3)}), g.raw, comm.size());
  comm.all_gather(g.raw, v);
  ranked_to_global(g.vg.reshape({bg, g.vg.dim(2), g.vg.dim(3)}), g.raw, comm.size());
}

// ---- p2p ring -----------------------------------------------------------------------------------

// Tags of the ring's messages (one pair of neighbours, each kind in order).
enum RingTag { kTagK = 0, kTagV = 1, kTagDk = 2, kTagDv = 3 };

struct RingScratch {
  std::array<TensorView, 2> k, v;          // [b, g, sl, d]: the block held and the one arriving
  TensorView part, part_lse;               // forward: one block's out and lse
  std::array<TensorView, 2> dk, dv;        // backward: the accumulator sent on, double-buffered
  TensorView dk_in, dv_in, ws;             // backward: the accumulator arriving; the attention's workspace
  RingScratch(Carver& c, const Dims& m, bool backward, Device device, int threads) {
    const Shape kv{m.b, m.g, m.sl, m.d};
    for (int i = 0; i < 2; ++i) {
      k[i] = c.take(kv);
      v[i] = c.take(kv);
    }
    if (!backward) {
      part = c.take({m.sl, m.b, m.n * m.d});
      part_lse = c.take({m.b, m.n, m.sl});
      return;
    }
    for (int i = 0; i < 2; ++i) {
      dk[i] = c.take(kv);
      dv[i] = c.take(kv);
    }
    dk_in = c.take(kv);
    dv_in = c.take(kv);
    ws = c.take_workspace(static_cast<int64_t>(attention_workspace_floats(m.b, m.n, m.sl, m.d, threads, device)));
  }
};

using Requests = std::vector<std::unique_ptr<CommRequest>>;
void wait_all(Requests& reqs) {
  for (auto& r : reqs) r->wait();
  reqs.clear();
}

// Sends the block held (k, v) to the next rank of the ring and receives the previous rank's into
// (k_in, v_in); the requests join `reqs`.
void pass_on(Communicator& comm, Requests& reqs, const TensorView& k, const TensorView& v, const TensorView& k_in,
             const TensorView& v_in) {
  const int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
  reqs.push_back(comm.recv_async(k_in, prev, kTagK));
  reqs.push_back(comm.recv_async(v_in, prev, kTagV));
  reqs.push_back(comm.send_async(k, next, kTagK));
  reqs.push_back(comm.send_async(v, next, kTagV));
}

void ring_fwd(const ContextParallel& cp, const TensorView& out, const TensorView& lse, const TensorView& q,
              const TensorView& k, const TensorView& v, const AttentionOptions& options, RingScratch& sc) {
  Communicator& comm = *cp.comm;
  const int size = comm.size(), rank = comm.rank();
  const int64_t sl = q.dim(2), s = sl * size;
  const SeqRows mine = cp.rows(sl);
  TensorView cur_k = k, cur_v = v;
  Requests reqs;
  for (int step = 0; step < size; ++step) {
    const int src = (rank - step + size) % size;  // whose keys this rank holds now
    const int slot = step % 2;
    if (step + 1 < size) pass_on(comm, reqs, cur_k, cur_v, sc.k[slot], sc.v[slot]);  // while attending to it
    const AttentionOptions o = at_positions(options, mine, ContextParallel::rows_of(src, size, sl), s);
    if (step == 0) {
      attention_fwd(out, lse, q, cur_k, cur_v, o);
    } else {
      attention_fwd(sc.part, sc.part_lse, q, cur_k, cur_v, o);
      attention_merge(out, lse, sc.part, sc.part_lse);
    }
    wait_all(reqs);
    cur_k = sc.k[slot];
    cur_v = sc.v[slot];
  }
}

void ring_bwd(const ContextParallel& cp, const TensorView& dq, const TensorView& dk, const TensorView& dv,
              const TensorView& dout, const TensorView& out, const TensorView& lse, const TensorView& q,
              const TensorView& k, const TensorView& v, const AttentionOptions& options, RingScratch& sc) {
  Communicator& comm = *cp.comm;
  const int size = comm.size(), rank = comm.rank();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const int64_t sl = q.dim(2), s = sl * size;
  const SeqRows mine = cp.rows(sl);
  TensorView cur_k = k, cur_v = v;
  Requests kv_reqs, grad_sends;
  for (int step = 0; step < size; ++step) {
    const int src = (rank - step + size) % size;
    const int slot = step % 2;
    if (step + 1 < size) pass_on(comm, kv_reqs, cur_k, cur_v, sc.k[slot], sc.v[slot]);
    // The block's dK/dV: this rank's share, plus what the ranks that held the block before sent.
    Requests grad_in;
    if (step > 0) {
      grad_in.push_back(comm.recv_async(sc.dk_in, prev, kTagDk));
      grad_in.push_back(comm.recv_async(sc.dv_in, prev, kTagDv));
    }
    // The accumulator sent two steps ago used this slot: it must have left.
    if (grad_sends.size() > 2) {
      for (int i = 0; i < 2; ++i) grad_sends[i]->wait();
      grad_sends.erase(grad_sends.begin(), grad_sends.begin() + 2);
    }
    zero(sc.dk[slot]);
    zero(sc.dv[slot]);
    attention_bwd(dq, sc.dk[slot], sc.dv[slot], dout, out, lse, q, cur_k, cur_v,
                  at_positions(options, mine, ContextParallel::rows_of(src, size, sl), s), sc.ws);
    wait_all(grad_in);
    if (step > 0) {
      accumulate(sc.dk[slot], sc.dk_in);
      accumulate(sc.dv[slot], sc.dv_in);
    }
    grad_sends.push_back(comm.send_async(sc.dk[slot], next, kTagDk));
    grad_sends.push_back(comm.send_async(sc.dv[slot], next, kTagDv));
    wait_all(kv_reqs);
    cur_k = sc.k[slot];
    cur_v = sc.v[slot];
  }
  // The last send reached this block's owner; this rank's own block comes back complete.
  Requests last;
  last.push_back(comm.recv_async(sc.dk_in, prev, kTagDk));
  last.push_back(comm.recv_async(sc.dv_in, prev, kTagDv));
  wait_all(last);
  wait_all(grad_sends);
  accumulate(dk, sc.dk_in);
  accumulate(dv, sc.dv_in);
}

// ---- a2a (Ulysses) --------------------------------------------------------------------------------

struct HeadScratch {
  TensorView qh, kh, vh, oh;      // [b, n/cp, S, d], [b, g/cp, S, d] x2, [S, b, (n/cp)·d]
  TensorView send, recv;          // b·n·sl·d each (the largest exchange)
  TensorView doh, dqh, dkh, dvh;  // backward: like oh, qh, kh, vh
  TensorView tmp, ws;             // backward: b·n·sl·d; the attention's workspace
  HeadScratch(Carver& c, const Dims& m, int cp, bool backward, Device device, int threads) {
    const int64_t s = m.sl * cp, np = m.n / cp, gp = m.g / cp, big = m.b * m.n * m.sl * m.d;
    qh = c.take({m.b, np, s, m.d});
    kh = c.take({m.b, gp, s, m.d});
    vh = c.take({m.b, gp, s, m.d});
    oh = c.take({s, m.b, np * m.d});
    send = c.take({big});
    recv = c.take({big});
    if (!backward) return;
    doh = c.take(oh.shape);
    dqh = c.take(qh.shape);
    dkh = c.take(kh.shape);
    dvh = c.take(vh.shape);
    tmp = c.take({big});
    ws = c.take_workspace(static_cast<int64_t>(attention_workspace_floats(m.b, np, s, m.d, threads, device)));
  }
  // Views of the exchange buffers sized for x (the buffers are as large as the largest exchange).
  TensorView send_for(const TensorView& x) const { return send.rows(0, x.numel()); }
  TensorView recv_for(const TensorView& x) const { return recv.rows(0, x.numel()); }
  TensorView tmp_for(const TensorView& x) const { return tmp.rows(0, x.numel()).reshape(x.shape); }
  Shape lse_shape() const { return {qh.dim(0), qh.dim(1), qh.dim(2)}; }
};

// The inner attention of head block `rank`: n of this rank's heads split over cp, the whole sequence.
AttentionOptions head_block_options(const AttentionOptions& options, int rank, int cp, int64_t n, int64_t s) {
  AttentionOptions o = at_positions(options, SeqRows{}, SeqRows{}, s);
  o.total_heads = options.total_heads ? options.total_heads : n;
  o.head_offset = options.head_offset + rank * (n / cp);
  return o;
}

// The inner attention's q, k, v (head block `rank`, every row) from this rank's.
void inner_inputs(Communicator& comm, const TensorView& q, const TensorView& k, const TensorView& v,
                  const HeadScratch& sc) {
  seq_to_heads(comm, sc.qh, q, sc.send_for(q), sc.recv_for(q));
  seq_to_heads(comm, sc.kh, k, sc.send_for(k), sc.recv_for(k));
  seq_to_heads(comm, sc.vh, v, sc.send_for(v), sc.recv_for(v));
}

void a2a_fwd(const ContextParallel& cp, const TensorView& out, const TensorView& lse, const TensorView& q,
             const TensorView& k, const TensorView& v, const AttentionOptions& options, HeadScratch& sc) {
  Communicator& comm = *cp.comm;
  const int size = comm.size();
  const int64_t s = q.dim(2) * size;
  inner_inputs(comm, q, k, v, sc);
  attention_fwd(sc.oh, lse.reshape(sc.lse_shape()), sc.qh, sc.kh, sc.vh,
                head_block_options(options, comm.rank(), size, q.dim(1), s));
  heads_to_rows(comm, out, sc.oh, sc.send_for(out), sc.recv_for(out));
}

void a2a_bwd(const ContextParallel& cp, const TensorView& dq, const TensorView& dk, const TensorView& dv,
             const TensorView& dout, const TensorView& out, const TensorView& lse, const TensorView& q,
             const TensorView& k, const TensorView& v, const AttentionOptions& options, HeadScratch& sc) {
  Communicator& comm = *cp.comm;
  const int size = comm.size();
  const int64_t s = q.dim(2) * size;
  // The forward's inner inputs and output again (nothing but this rank's tensors is kept).
  inner_inputs(comm, q, k, v, sc);
  rows_to_heads(comm, sc.oh, out, sc.send_for(out), sc.recv_for(out));
  rows_to_heads(comm, sc.doh, dout, sc.send_for(dout), sc.recv_for(dout));
  for (const TensorView* t : {&sc.dqh, &sc.dkh, &sc.dvh}) zero(*t);
  attention_bwd(sc.dqh, sc.dkh, sc.dvh, sc.doh, sc.oh, lse.reshape(sc.lse_shape()), sc.qh, sc.kh, sc.vh,
                head_block_options(options, comm.rank(), size, q.dim(1), s), sc.ws);
  heads_to_seq_add(comm, dq, sc.dqh, sc.send_for(dq), sc.recv_for(dq), sc.tmp_for(dq));
  heads_to_seq_add(comm, dk, sc.dkh, sc.send_for(dk), sc.recv_for(dk), sc.tmp_for(dk));
  heads_to_seq_add(comm, dv, sc.dvh, sc.send_for(dv), sc.recv_for(dv), sc.tmp_for(dv));
}

}  // namespace

void cp_gather_sequence(const ContextParallel& cp, const TensorView& whole, const TensorView& x, const TensorView& raw) {
  const int64_t s = whole.dim(0), w = whole.numel() / s;
  MT_CHECK(x.numel() * cp.size() == whole.numel() && raw.numel() >= whole.numel())
      << "cp_gather_sequence: " << x.str() << " from " << cp.size() << " ranks does not make " << whole.str();
  const TensorView ranked = raw.reshape({raw.numel()}).rows(0, whole.numel());
  cp.comm->all_gather(ranked, x.reshape({x.numel()}));
  ranked_to_global(whole.reshape({1, s, w}), ranked, cp.size());
}

void cp_take_rows(const ContextParallel& cp, const TensorView& x, const TensorView& whole) {
  const int64_t sl = x.dim(0), w = x.numel() / sl, c = sl / 2, r = cp.rank();
  const TensorView from = whole.reshape({1, whole.dim(0), w}), to = x.reshape({1, sl, w});
  copy_row_block(to, 0, from, r * c, c);
  copy_row_block(to, c, from, (2 * cp.size() - 1 - r) * c, c);
}

void check_cp_attention(CpCommType type, int cp, int64_t n, int64_t g, int64_t sl) {
  if (cp <= 1) return;
  MT_CHECK(sl % 2 == 0) << "context parallelism: " << sl << " local rows cannot hold two equal chunks; "
                        << "--seq-length must be divisible by 2 x --context-parallel-size (" << 2 * cp << ")";
  const bool heads_split = n % cp == 0 && g % cp == 0;
  MT_CHECK(type != CpCommType::a2a || heads_split)
      << "--cp-comm-type a2a splits heads over --context-parallel-size " << cp << ", but this rank has " << n
      << " attention heads and " << g << " query groups (after tensor parallelism); use p2p or allgather, or "
      << "a --context-parallel-size dividing both";
}

size_t cp_attention_scratch_floats(CpCommType type, int cp, int64_t b, int64_t n, int64_t g, int64_t sl, int64_t d,
                                   int threads, Device device) {
  if (cp <= 1) return 0;
  check_cp_attention(type, cp, n, g, sl);
  const Dims m(b, n, g, sl, d);
  int64_t most = 0;
  for (bool backward : {false, true}) {
    Carver c{TensorView()};
    switch (type) {
      case CpCommType::p2p: RingScratch{c, m, backward, device, threads}; break;
      case CpCommType::a2a: HeadScratch{c, m, cp, backward, device, threads}; break;
      case CpCommType::allgather: GatherScratch{c, m, cp, backward, device, threads}; break;
    }
    most = std::max(most, c.used());
  }
  return static_cast<size_t>(most);
}

void cp_attention_fwd(const ContextParallel& cp, const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k, const TensorView& v, const AttentionOptions& options,
                      const TensorView& scratch) {
  const Dims m(q, k);
  check_cp_attention(cp.comm_type, cp.size(), m.n, m.g, m.sl);
  Carver c(scratch);
  const int threads = backend_for(scratch.device).max_threads();
  switch (cp.comm_type) {
    case CpCommType::p2p: {
      RingScratch sc(c, m, false, scratch.device, threads);
      return ring_fwd(cp, out, lse, q, k, v, options, sc);
    }
    case CpCommType::a2a: {
      HeadScratch sc(c, m, cp.size(), false, scratch.device, threads);
      return a2a_fwd(cp, out, lse, q, k, v, options, sc);
    }
    case CpCommType::allgather: {
      GatherScratch sc(c, m, cp.size(), false, scratch.device, threads);
      gather_kv(*cp.comm, sc, k, v);
      return attention_fwd(out, lse, q, sc.kg, sc.vg, at_positions(options, cp.rows(m.sl), SeqRows{}, m.sl * cp.size()));
    }
  }
}

void cp_attention_bwd(const ContextParallel& cp, const TensorView& dq, const TensorView& dk, const TensorView& dv,
                      const TensorView& dout, const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k, const TensorView& v, const AttentionOptions& options,
                      const TensorView& scratch) {
  const Dims m(q, k);
  check_cp_attention(cp.comm_type, cp.size(), m.n, m.g, m.sl);
  Carver c(scratch);
  const int threads = backend_for(scratch.device).max_threads();
  Communicator& comm = *cp.comm;
  const int64_t s = m.sl * cp.size();
  switch (cp.comm_type) {
    case CpCommType::p2p: {
      RingScratch sc(c, m, true, scratch.device, threads);
      return ring_bwd(cp, dq, dk, dv, dout, out, lse, q, k, v, options, sc);
    }
    case CpCommType::a2a: {
      HeadScratch sc(c, m, cp.size(), true, scratch.device, threads);
      return a2a_bwd(cp, dq, dk, dv, dout, out, lse, q, k, v, options, sc);
    }
    case CpCommType::allgather: {
      GatherScratch sc(c, m, cp.size(), true, scratch.device, threads);
      gather_kv(comm, sc, k, v);
      zero(sc.dkg);
      zero(sc.dvg);
      attention_bwd(dq, sc.dkg, sc.dvg, dout, out, lse, q, sc.kg, sc.vg,
                    at_positions(options, cp.rows(m.sl), SeqRows{}, s), sc.ws);
      const int64_t bg = m.b * m.g;
      for (auto [grad, whole] : {std::pair{dk, sc.dkg}, std::pair{dv, sc.dvg}}) {
        global_to_ranked(sc.raw, whole.reshape({bg, s, m.d}), cp.size());
        comm.reduce_scatter(sc.part, sc.raw, ReduceOp::sum);
        accumulate(grad, sc.part);
      }
      return;
    }
  }
}

}  // namespace mt
