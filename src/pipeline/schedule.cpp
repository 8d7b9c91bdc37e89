// Owns schedule generation: Megatron's compute order per rank, and the exchanges placed by running
// the orders in lock-step ticks (see schedule.h for why that cannot deadlock).
#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "base/error.h"

namespace mt {
namespace {

struct Step {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;
};

// Megatron's get_schedule_table: (micro-batch, chunk) of each virtual micro-batch, in forward order.
std::vector<std::pair<int, int>> schedule_table(int m, int v, int group) {
  std::vector<std::pair<int, int>> table;
  for (int begin = 0; begin < m; begin += group)
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = begin; mb < std::min(begin + group, m); ++mb) table.emplace_back(mb, chunk);
  return table;
}

std::vector<Step> compute_order(const ScheduleConfig& c, ScheduleKind kind, int rank) {
  const int m = c.num_microbatches;
  std::vector<Step> order;
  if (kind == ScheduleKind::no_pipelining) {
    for (int mb = 0; mb < m; ++mb) {
      order.push_back({true, mb, 0});
      if (!c.forward_only) order.push_back({false, mb, 0});
    }
    return order;
  }
  const auto table = schedule_table(m, c.vp, c.effective_group_size());
  const int total = static_cast<int>(table.size());
  const int warmup = warmup_microbatches(c, rank);
  const auto fwd = [&](int k) { order.push_back({true, table[k].first, table[k].second}); };
  const auto bwd = [&](int k) { order.push_back({false, table[k].first, c.vp - 1 - table[k].second}); };
  for (int k = 0; k < warmup; ++k) fwd(k);
  for (int k = 0; k < total - warmup; ++k) {
    fwd(warmup + k);
    bwd(k);
  }
  if (!c.forward_only)
    for (int k = total - warmup; k < total; ++k) bwd(k);
  return order;
}

// A tensor held by a rank: (direction, micro-batch, virtual stage that produced it).
using TensorId = std::tuple<Direction, int, int>;

}  // namespace

ScheduleKind schedule_kind(const ScheduleConfig& c) {
  MT_CHECK(c.pp >= 1) << "--pipeline-model-parallel-size " << c.pp << " must be >= 1";
  MT_CHECK(c.vp >= 1) << "virtual stages per pipeline rank " << c.vp << " must be >= 1";
  MT_CHECK(c.num_microbatches >= 1) << "the number of micro-batches " << c.num_microbatches << " must be >= 1";
  MT_CHECK(c.group_size >= 0) << "--microbatch-group-size-per-virtual-pipeline-stage " << c.group_size
                              << " must be >= 1";
  if (c.pp == 1) {
    MT_CHECK(c.vp == 1) << "virtual pipeline stages (" << c.vp << " per rank) need --pipeline-model-parallel-size >= 2";
    return ScheduleKind::no_pipelining;
  }
  if (c.vp == 1) return ScheduleKind::one_f_one_b;
  // Megatron's checks in forward_backward_pipelining_with_interleaving.
  const int g = c.effective_group_size();
  const int m = c.num_microbatches;
  MT_CHECK(c.pp <= g && g <= m) << "the interleaved schedule runs micro-batches in groups of "
                                << "--microbatch-group-size-per-virtual-pipeline-stage " << g
                                << " (default: --pipeline-model-parallel-size), which must lie between "
                                << "--pipeline-model-parallel-size " << c.pp << " and the number of micro-batches " << m
                                << (m < c.pp ? "; use at least as many micro-batches per step as pipeline ranks" : "");
  if (m % g != 0 && m % g < c.pp) {
    int works = m;  // the valid group size nearest g (m itself always is)
    for (int candidate = c.pp; candidate <= m; ++candidate)
      if ((m % candidate == 0 || m % candidate >= c.pp) && std::abs(candidate - g) < std::abs(works - g))
        works = candidate;
    MT_FAIL() << m << " micro-batches in groups of --microbatch-group-size-per-virtual-pipeline-stage " << g
              << " leave a last group of " << m % g << ", fewer than --pipeline-model-parallel-size " << c.pp
              << " (the pipeline would stall on it, so Megatron refuses it); use a number of micro-batches that "
              << "is a multiple of " << g << " or leaves at least " << c.pp << ", or a group size such as " << works;
  }
  return ScheduleKind::interleaved;
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::no_pipelining:
      return "no pipelining";
    case ScheduleKind::one_f_one_b:
      return "1F1B";
    case ScheduleKind::interleaved:
      return "interleaved 1F1B";
  }
  return "?";
}

int warmup_microbatches(const ScheduleConfig& c, int rank) {
  const ScheduleKind kind = schedule_kind(c);
  MT_CHECK(rank >= 0 && rank < c.pp) << "pipeline rank " << rank << " outside [0, " << c.pp << ")";
  const int total = c.num_microbatches * c.vp;
  if (c.forward_only) return total;
  switch (kind) {
    case ScheduleKind::no_pipelining:
      return 0;
    case ScheduleKind::one_f_one_b:
      return std::min(c.pp - rank - 1, total);
    case ScheduleKind::interleaved:
      return std::min(2 * (c.pp - rank - 1) + (c.vp - 1) * c.effective_group_size(), total);
  }
  return 0;
}

const char* direction_name(Direction d) { return d == Direction::activation ? "act" : "grad"; }

std::string to_string(const Action& a) {
  std::ostringstream s;
  if (a.kind != Action::Kind::exchange) {
    s << (a.kind == Action::Kind::forward ? "F" : "B") << "(mb " << a.microbatch << ", chunk " << a.chunk << ")";
    return s.str();
  }
  s << "X[";
  const char* sep = "";
  for (const Transfer& t : a.sends) {
    s << sep << "send " << direction_name(t.direction) << " mb " << t.microbatch << " vs " << t.stage << " -> rank "
      << t.peer;
    sep = "; ";
  }
  for (const Transfer& t : a.recvs) {
    s << sep << "recv " << direction_name(t.direction) << " mb " << t.microbatch << " vs " << t.stage << " <- rank "
      << t.peer;
    sep = "; ";
  }
  s << "]";
  return s.str();
}

Schedule build_schedule(const ScheduleConfig& c) {
  Schedule schedule;
  schedule.config = c;
  schedule.kind = schedule_kind(c);
  const int pp = c.pp;
  const int last_stage = pp * c.vp - 1;
  std::vector<std::vector<Step>> orders(pp);
  for (int r = 0; r < pp; ++r) orders[r] = compute_order(c, schedule.kind, r);
  schedule.ranks.resize(pp);

  // Lock-step ticks: each rank runs its next compute if its input has arrived in an earlier tick;
  // what the tick computes is exchanged at its end.
  std::vector<size_t> next(pp, 0);
  std::vector<std::set<TensorId>> arrived(pp);
  const auto done = [&] {
    for (int r = 0; r < pp; ++r)
      if (next[r] < orders[r].size()) return false;
    return true;
  };
  while (!done()) {
    std::vector<std::vector<Transfer>> sends(pp), recvs(pp);
    bool progressed = false;
    for (int r = 0; r < pp; ++r) {
      if (next[r] == orders[r].size()) continue;
      const Step& step = orders[r][next[r]];
      const int vs = virtual_stage(pp, r, step.chunk);
      // The input a compute needs from another rank: the previous stage's activation, or the
      // next stage's gradient.
      const bool needs_input = step.forward ? vs > 0 : vs < last_stage;
      const TensorId input{step.forward ? Direction::activation : Direction::gradient, step.microbatch,
                           step.forward ? vs - 1 : vs + 1};
      if (needs_input && !arrived[r].erase(input)) continue;
      schedule.ranks[r].push_back(step.forward ? Action::forward(step.microbatch, step.chunk)
                                               : Action::backward(step.microbatch, step.chunk));
      ++next[r];
      progressed = true;
      const bool has_output = step.forward ? vs < last_stage : vs > 0;
      if (!has_output) continue;
      const Direction dir = step.forward ? Direction::activation : Direction::gradient;
      const int dst = (step.forward ? vs + 1 : vs - 1) % pp;
      sends[r].push_back({dst, dir, step.microbatch, vs});
      recvs[dst].push_back({r, dir, step.microbatch, vs});
    }
    MT_CHECK(progressed) << "internal: the " << schedule_kind_name(schedule.kind) << " compute orders stall";
    for (int r = 0; r < pp; ++r) {
      for (const Transfer& t : recvs[r]) arrived[r].insert({t.direction, t.microbatch, t.stage});
      if (!sends[r].empty() || !recvs[r].empty())
        schedule.ranks[r].push_back(Action::exchange(std::move(sends[r]), std::move(recvs[r])));
    }
  }
  return schedule;
}

std::vector<int> max_in_flight(const std::vector<Action>& actions, int vp) {
  std::vector<int> now(vp, 0), peak(vp, 0);
  bool any_backward = false;
  for (const Action& a : actions) {
    if (a.kind == Action::Kind::exchange) continue;
    MT_CHECK(a.chunk >= 0 && a.chunk < vp) << to_string(a) << ": chunk outside [0, " << vp << ")";
    if (a.kind == Action::Kind::forward) {
      peak[a.chunk] = std::max(peak[a.chunk], ++now[a.chunk]);
    } else {
      --now[a.chunk];
      any_backward = true;
    }
  }
  // Forward-only lists keep nothing between passes (Stage::forward_only): no slots.
  if (!any_backward) std::fill(peak.begin(), peak.end(), 0);
  return peak;
}

int max_buffered_receives(const std::vector<Action>& actions, int pp) {
  // Received tensors not yet consumed, keyed by (direction, micro-batch, consuming chunk).
  std::multiset<std::tuple<Direction, int, int>> held;
  int peak = 0;
  for (const Action& a : actions) {
    if (a.kind == Action::Kind::exchange) {
      for (const Transfer& t : a.recvs) held.insert({t.direction, t.microbatch, t.consumer_stage() / pp});
      peak = std::max(peak, static_cast<int>(held.size()));
      continue;
    }
    const Direction dir = a.kind == Action::Kind::forward ? Direction::activation : Direction::gradient;
    const auto it = held.find({dir, a.microbatch, a.chunk});
    if (it != held.end()) held.erase(it);
  }
  return peak;
}

}  // namespace mt
