// Owns the lock-step rendezvous simulation of pipeline action lists and its checks (simulate.h).
#include "pipeline/simulate.h"

#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "base/error.h"

namespace mt {
namespace {

// A tensor: (direction, micro-batch, virtual stage that produced it).
using TensorId = std::tuple<Direction, int, int>;

TensorId id_of(const Transfer& t) { return {t.direction, t.microbatch, t.stage}; }

std::string describe(const TensorId& id) {
  std::ostringstream s;
  s << direction_name(std::get<0>(id)) << " mb " << std::get<1>(id) << " vs " << std::get<2>(id);
  return s.str();
}

// A broken rule; simulate() turns it into the report's error.
struct Violation {
  std::string message;
};

template <typename... T>
std::string cat(const T&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}

class Simulator {
 public:
  Simulator(const ScheduleConfig& config, const std::vector<std::vector<Action>>& ranks)
      : c_(config), lists_(ranks), last_stage_(config.pp * config.vp - 1), ranks_(config.pp) {
    for (RankState& r : ranks_) r.pass.assign(config.vp, std::vector<int>(config.num_microbatches, 0));
  }

  void run(SimulationReport& report) {
    report.busy_ticks.assign(c_.pp, 0);
    if (static_cast<int>(lists_.size()) != c_.pp) fail(cat(lists_.size(), " action lists for pp ", c_.pp));
    for (;;) {
      communicate();
      bool computed = false;
      for (int r = 0; r < c_.pp; ++r) {
        if (finished(r) || current(r).kind == Action::Kind::exchange) continue;
        compute(r, current(r));
        ++ranks_[r].pc;
        ++report.busy_ticks[r];
        computed = true;
      }
      if (!computed) break;
      ++report.ticks;
    }
    for (int r = 0; r < c_.pp; ++r)
      if (!finished(r)) deadlock();
    check_complete();
  }

 private:
  struct RankState {
    size_t pc = 0;
    bool posted = false;                     // the current exchange's transfers are posted
    std::vector<bool> send_done, recv_done;  // ... and which of them have matched
    std::vector<std::vector<int>> pass;      // [chunk][mb]: 0 none, 1 forward ran, 2 backward ran
    std::set<TensorId> unsent;               // produced, not yet sent
    std::multiset<TensorId> received;        // received, not yet consumed
  };
  struct Posted {
    int rank;
    size_t index;  // into the exchange's sends (or recvs)
  };
  struct Channel {  // one (source, destination, direction): FIFO matching
    std::deque<Posted> sends, recvs;
  };

  [[noreturn]] static void fail(const std::string& message) { throw Violation{message}; }

  bool finished(int r) const { return ranks_[r].pc >= lists_[r].size(); }
  const Action& current(int r) const { return lists_[r][ranks_[r].pc]; }
  int owner(int stage) const { return stage % c_.pp; }
  std::string where(int r) const {
    std::ostringstream s;
    s << "rank " << r << " action " << ranks_[r].pc << " " << to_string(current(r));
    return s.str();
  }

  // Runs exchanges on every rank until none can post or complete.
  void communicate() {
    for (bool changed = true; changed;) {
      changed = false;
      for (int r = 0; r < c_.pp; ++r) {
        while (!finished(r) && current(r).kind == Action::Kind::exchange) {
          if (!ranks_[r].posted) {
            post(r);
            changed = true;
          }
          if (!try_finish(r)) break;
          ++ranks_[r].pc;
          ranks_[r].posted = false;
          changed = true;
        }
      }
    }
  }

  // A transfer's peer and stage must be where the partition puts them.
  void check_route(int r, const Transfer& t, bool send) {
    const bool act = t.direction == Direction::activation;
    const int consumer = t.consumer_stage();
    const int producer_rank = send ? r : t.peer;
    const int consumer_rank = send ? t.peer : r;
    const bool ok = t.peer >= 0 && t.peer < c_.pp && t.stage >= 0 && t.stage <= last_stage_ && consumer >= 0 &&
                    consumer <= last_stage_ && t.microbatch >= 0 && t.microbatch < c_.num_microbatches &&
                    owner(t.stage) == producer_rank && owner(consumer) == consumer_rank && t.peer != r;
    if (!ok)
      fail(cat(where(r), ": ", (send ? "sends " : "receives "), describe(id_of(t)), (send ? " to" : " from"), " rank ",
               t.peer, ", but ", (act ? "activations" : "gradients"), " of virtual stage ", t.stage,
               " go from its rank to the rank of virtual stage ", consumer));
  }

  void post(int r) {
    RankState& s = ranks_[r];
    const Action& a = current(r);
    s.posted = true;
    s.send_done.assign(a.sends.size(), false);
    s.recv_done.assign(a.recvs.size(), false);
    for (size_t i = 0; i < a.sends.size(); ++i) {
      const Transfer& t = a.sends[i];
      check_route(r, t, true);
      if (!s.unsent.erase(id_of(t)))
        fail(cat(where(r), ": sends ", describe(id_of(t)), " before computing it, or twice"));
      channel(r, t.peer, t.direction).sends.push_back({r, i});
      match(r, t.peer, t.direction);
    }
    for (size_t i = 0; i < a.recvs.size(); ++i) {
      const Transfer& t = a.recvs[i];
      check_route(r, t, false);
      channel(t.peer, r, t.direction).recvs.push_back({r, i});
      match(t.peer, r, t.direction);
    }
  }

  Channel& channel(int src, int dst, Direction d) { return channels_[{src, dst, d}]; }

  void match(int src, int dst, Direction d) {
    Channel& ch = channel(src, dst, d);
    while (!ch.sends.empty() && !ch.recvs.empty()) {
      const Posted send = ch.sends.front(), recv = ch.recvs.front();
      ch.sends.pop_front();
      ch.recvs.pop_front();
      const Transfer& sent = current(send.rank).sends[send.index];
      const Transfer& want = current(recv.rank).recvs[recv.index];
      if (id_of(sent) != id_of(want))
        fail(cat("mismatch: ", where(recv.rank), " receives ", describe(id_of(want)), " from rank ", src,
                 ", but the matching send (", where(send.rank), ") carries ", describe(id_of(sent))));
      ranks_[send.rank].send_done[send.index] = true;
      ranks_[recv.rank].recv_done[recv.index] = true;
    }
  }

  // Whether rank r's posted exchange has every transfer matched; if so its receives arrive.
  bool try_finish(int r) {
    RankState& s = ranks_[r];
    for (bool done : s.send_done)
      if (!done) return false;
    for (bool done : s.recv_done)
      if (!done) return false;
    for (const Transfer& t : current(r).recvs) s.received.insert(id_of(t));
    return true;
  }

  // Takes the received input `id` that `what` on rank r needs.
  void consume(int r, const TensorId& id, const char* what) {
    auto& held = ranks_[r].received;
    const auto it = held.find(id);
    if (it == held.end()) fail(cat(where(r), ": runs before receiving its ", what, " ", describe(id)));
    held.erase(it);
  }

  void compute(int r, const Action& a) {
    RankState& s = ranks_[r];
    if (a.chunk < 0 || a.chunk >= c_.vp || a.microbatch < 0 || a.microbatch >= c_.num_microbatches)
      fail(cat(where(r), ": micro-batch or chunk outside ", c_.num_microbatches, " micro-batches, ", c_.vp, " chunks"));
    const int vs = virtual_stage(c_.pp, r, a.chunk);
    // A chunk leaves its output in one buffer that its next compute overwrites: it must be sent first.
    for (const TensorId& id : s.unsent)
      if (std::get<2>(id) == vs) fail(cat(where(r), ": computes again before sending its ", describe(id)));
    int& pass = s.pass[a.chunk][a.microbatch];
    if (a.kind == Action::Kind::forward) {
      if (pass != 0) fail(cat(where(r), ": this forward already ran"));
      if (vs > 0) consume(r, {Direction::activation, a.microbatch, vs - 1}, "input activation");
      if (vs < last_stage_) s.unsent.insert({Direction::activation, a.microbatch, vs});
      pass = 1;
    } else {
      if (c_.forward_only) fail(cat(where(r), ": a backward in a forward-only schedule"));
      if (pass != 1) fail(cat(where(r), (pass == 0 ? ": runs before its forward" : ": this backward already ran")));
      if (vs < last_stage_) consume(r, {Direction::gradient, a.microbatch, vs + 1}, "output gradient");
      if (vs > 0) s.unsent.insert({Direction::gradient, a.microbatch, vs});
      pass = 2;
    }
  }

  [[noreturn]] void deadlock() {
    std::ostringstream s;
    s << "deadlock: no rank can move;";
    for (int r = 0; r < c_.pp; ++r) {
      if (finished(r)) continue;
      const RankState& st = ranks_[r];
      s << " " << where(r) << " waits for";
      const Action& a = current(r);
      for (size_t i = 0; i < a.sends.size(); ++i)
        if (!st.send_done[i]) s << " rank " << a.sends[i].peer << " to receive " << describe(id_of(a.sends[i])) << ",";
      for (size_t i = 0; i < a.recvs.size(); ++i)
        if (!st.recv_done[i]) s << " rank " << a.recvs[i].peer << " to send " << describe(id_of(a.recvs[i])) << ",";
      s << ";";
    }
    fail(s.str());
  }

  void check_complete() {
    const int want = c_.forward_only ? 1 : 2;
    for (int r = 0; r < c_.pp; ++r) {
      const RankState& s = ranks_[r];
      for (int chunk = 0; chunk < c_.vp; ++chunk)
        for (int mb = 0; mb < c_.num_microbatches; ++mb)
          if (s.pass[chunk][mb] != want)
            fail(cat("rank ", r, " never runs the ", (s.pass[chunk][mb] == 0 ? "forward" : "backward"),
                     " of micro-batch ", mb, " on chunk ", chunk));
      if (!s.unsent.empty()) fail(cat("rank ", r, " never sends ", describe(*s.unsent.begin())));
      if (!s.received.empty()) fail(cat("rank ", r, " never uses the received ", describe(*s.received.begin())));
    }
  }

  const ScheduleConfig& c_;
  const std::vector<std::vector<Action>>& lists_;
  const int last_stage_;
  std::vector<RankState> ranks_;
  std::map<std::tuple<int, int, Direction>, Channel> channels_;
};

}  // namespace

SimulationReport simulate(const ScheduleConfig& config, const std::vector<std::vector<Action>>& ranks) {
  SimulationReport report;
  MT_CHECK(config.pp >= 1 && config.vp >= 1 && config.num_microbatches >= 1)
      << "simulate: pp " << config.pp << ", vp " << config.vp << ", micro-batches " << config.num_microbatches
      << " must all be >= 1";
  try {
    Simulator(config, ranks).run(report);
  } catch (const Violation& v) {
    report.ok = false;
    report.error = v.message;
  }
  return report;
}

void check_schedule(const Schedule& schedule) {
  const SimulationReport report = simulate(schedule.config, schedule.ranks);
  MT_CHECK(report.ok) << "the " << schedule_kind_name(schedule.kind) << " schedule for pp " << schedule.config.pp
                      << ", vp " << schedule.config.vp << ", " << schedule.config.num_microbatches
                      << " micro-batches fails: " << report.error;
}

}  // namespace mt
