// pipeline/schedule and pipeline/simulate: a hand-derived 1F1B list, Megatron's schedule table and
// warm-up counts, a sweep over many (pp, v, m, G, forward-only) where the simulator must find no
// deadlock and every check must pass, the peak in-flight micro-batches, Megatron's constraints on
// m and G, and broken lists the simulator must catch (so it can fail).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"
#include "testing.h"

namespace mt {
namespace {

using test::expect_error_mentioning;

ScheduleConfig config(int pp, int vp, int m, int group = 0, bool forward_only = false) {
  ScheduleConfig c;
  c.pp = pp;
  c.vp = vp;
  c.num_microbatches = m;
  c.group_size = group;
  c.forward_only = forward_only;
  return c;
}

std::vector<std::string> strings(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) out.push_back(to_string(a));
  return out;
}

// The computes of one rank's list, without the exchanges.
std::vector<Action> computes(const std::vector<Action>& actions) {
  std::vector<Action> out;
  for (const Action& a : actions)
    if (a.kind != Action::Kind::exchange) out.push_back(a);
  return out;
}

// Megatron's rule for the interleaved schedule's m and G (schedules.py).
bool megatron_accepts_interleaved(int pp, int m, int g) { return pp <= g && g <= m && (m % g == 0 || m % g >= pp); }

// 1F1B on 2 ranks, 3 micro-batches, derived by hand: rank 0 warms up with one forward, the
// steady state pairs a send of the next activation with the receive of a gradient
// (send_forward_recv_backward), and nothing is received before the tick its sender computes it.
TEST(PipelineSchedule, OneFOneBByHand) {
  const Schedule s = build_schedule(config(2, 1, 3));
  EXPECT_EQ(s.kind, ScheduleKind::one_f_one_b);
  EXPECT_EQ(strings(s.ranks[0]), (std::vector<std::string>{
                                     "F(mb 0, chunk 0)",
                                     "X[send act mb 0 vs 0 -> rank 1]",
                                     "F(mb 1, chunk 0)",
                                     "X[send act mb 1 vs 0 -> rank 1]",
                                     "X[recv grad mb 0 vs 1 <- rank 1]",
                                     "B(mb 0, chunk 0)",
                                     "F(mb 2, chunk 0)",
                                     "X[send act mb 2 vs 0 -> rank 1; recv grad mb 1 vs 1 <- rank 1]",
                                     "B(mb 1, chunk 0)",
                                     "X[recv grad mb 2 vs 1 <- rank 1]",
                                     "B(mb 2, chunk 0)",
                                 }));
  EXPECT_EQ(strings(s.ranks[1]), (std::vector<std::string>{
                                     "X[recv act mb 0 vs 0 <- rank 0]",
                                     "F(mb 0, chunk 0)",
                                     "X[recv act mb 1 vs 0 <- rank 0]",
                                     "B(mb 0, chunk 0)",
                                     "X[send grad mb 0 vs 1 -> rank 0]",
                                     "F(mb 1, chunk 0)",
                                     "B(mb 1, chunk 0)",
                                     "X[send grad mb 1 vs 1 -> rank 0; recv act mb 2 vs 0 <- rank 0]",
                                     "F(mb 2, chunk 0)",
                                     "B(mb 2, chunk 0)",
                                     "X[send grad mb 2 vs 1 -> rank 0]",
                                 }));
  const SimulationReport report = simulate(s.config, s.ranks);
  ASSERT_TRUE(report.ok) << report.error;
  EXPECT_EQ(report.ticks, 8);  // 2·(m + pp - 1) with forward and backward one tick each
  EXPECT_EQ(report.busy_ticks, (std::vector<int>{6, 6}));
  EXPECT_EQ(max_buffered_receives(s.ranks[0], 2), 1);
  EXPECT_EQ(max_buffered_receives(s.ranks[1], 2), 1);
}

TEST(PipelineSchedule, NoPipeliningAlternates) {
  const Schedule s = build_schedule(config(1, 1, 3));
  EXPECT_EQ(s.kind, ScheduleKind::no_pipelining);
  EXPECT_EQ(strings(s.ranks[0]),
            (std::vector<std::string>{"F(mb 0, chunk 0)", "B(mb 0, chunk 0)", "F(mb 1, chunk 0)", "B(mb 1, chunk 0)",
                                      "F(mb 2, chunk 0)", "B(mb 2, chunk 0)"}));
  EXPECT_EQ(max_in_flight(s.ranks[0], 1), (std::vector<int>{1}));
  const Schedule eval = build_schedule(config(1, 1, 2, 0, true));
  EXPECT_EQ(strings(eval.ranks[0]), (std::vector<std::string>{"F(mb 0, chunk 0)", "F(mb 1, chunk 0)"}));
  EXPECT_EQ(max_in_flight(eval.ranks[0], 1), (std::vector<int>{0}));
}

// Megatron's table for PP 2, G 3, m 5, v 2 (the comment in schedules.py):
// micro-batch 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1. Backwards use chunk v-1-c.
TEST(PipelineSchedule, InterleavedTableOrder) {
  const Schedule s = build_schedule(config(2, 2, 5, 3));
  EXPECT_EQ(s.kind, ScheduleKind::interleaved);
  const std::vector<std::pair<int, int>> table{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1},
                                               {2, 1}, {3, 0}, {4, 0}, {3, 1}, {4, 1}};
  for (int r = 0; r < 2; ++r) {
    std::vector<std::pair<int, int>> forwards, backwards;
    for (const Action& a : computes(s.ranks[r]))
      (a.kind == Action::Kind::forward ? forwards : backwards).emplace_back(a.microbatch, a.chunk);
    EXPECT_EQ(forwards, table) << "rank " << r;
    ASSERT_EQ(backwards.size(), table.size());
    for (size_t k = 0; k < table.size(); ++k)
      EXPECT_EQ(backwards[k], std::make_pair(table[k].first, 1 - table[k].second));
  }
  // Warm-up: 2·(pp - r - 1) + (v - 1)·G, capped at m·v.
  EXPECT_EQ(warmup_microbatches(s.config, 0), 5);
  EXPECT_EQ(warmup_microbatches(s.config, 1), 3);
}

TEST(PipelineSchedule, WarmupCountsAreMegatrons) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = 1; m <= 20; ++m)
      for (int r = 0; r < pp; ++r) {
        EXPECT_EQ(warmup_microbatches(config(pp, 1, m), r), std::min(pp - r - 1, m));
        EXPECT_EQ(warmup_microbatches(config(pp, 1, m, 0, true), r), m);
        for (int v = 2; v <= 4; ++v)
          for (int g = pp; g <= m; ++g) {
            if (!megatron_accepts_interleaved(pp, m, g)) continue;
            EXPECT_EQ(warmup_microbatches(config(pp, v, m, g), r), std::min(2 * (pp - r - 1) + (v - 1) * g, m * v));
          }
      }
  // m == pp (so G == pp): rank 0 runs every forward as warm-up, the last rank does not.
  EXPECT_EQ(warmup_microbatches(config(4, 2, 4), 0), 8);
  EXPECT_EQ(warmup_microbatches(config(4, 2, 4), 3), 4);
  EXPECT_EQ(warmup_microbatches(config(1, 1, 5), 0), 0);
}

// Checks one valid config: the simulator passes it, each rank's computes follow the warm-up /
// steady / cool-down shape, and the in-flight peaks are Megatron's.
void check_config(const ScheduleConfig& c) {
  SCOPED_TRACE(testing::Message() << "pp " << c.pp << " v " << c.vp << " m " << c.num_microbatches << " G "
                                  << c.group_size << (c.forward_only ? " forward-only" : ""));
  const Schedule s = build_schedule(c);
  const SimulationReport report = simulate(c, s.ranks);
  ASSERT_TRUE(report.ok) << report.error;
  const int total = c.num_microbatches * c.vp;
  for (int r = 0; r < c.pp; ++r) {
    const std::vector<Action> steps = computes(s.ranks[r]);
    ASSERT_EQ(steps.size(), static_cast<size_t>(c.forward_only ? total : 2 * total));
    if (c.forward_only) continue;
    const int warmup = c.pp == 1 ? 0 : warmup_microbatches(c, r);
    // Warm-up forwards, then (forward, backward) pairs, then backwards.
    for (int i = 0; i < 2 * total; ++i) {
      const bool forward = i < warmup || (i < 2 * total - warmup && (i - warmup) % 2 == 0);
      EXPECT_EQ(steps[i].kind == Action::Kind::forward, forward) << "rank " << r << " compute " << i;
    }
    // Peak in flight, all chunks together: the warm-up plus the first steady forward.
    int now = 0, peak = 0;
    for (const Action& a : steps) peak = std::max(peak, now += a.kind == Action::Kind::forward ? 1 : -1);
    EXPECT_EQ(peak, std::min(warmup + 1, total)) << "rank " << r;
    const std::vector<int> per_chunk = max_in_flight(s.ranks[r], c.vp);
    // 1F1B: stage r holds at most pp - r micro-batches (the PTD-P paper's bound), fewer when m is small.
    if (c.vp == 1) {
      EXPECT_EQ(per_chunk[0], std::min(c.pp - r, c.num_microbatches)) << "rank " << r;
    }
    for (int chunk = 0; chunk < c.vp; ++chunk) {
      EXPECT_GE(per_chunk[chunk], 1);
      EXPECT_LE(per_chunk[chunk], c.num_microbatches);
    }
  }
  // With one tick per compute, 1F1B takes 2·(m + pp - 1) ticks: the bubble is (pp - 1)/m.
  if (s.kind != ScheduleKind::interleaved && !c.forward_only) {
    EXPECT_EQ(report.ticks, 2 * (c.num_microbatches + c.pp - 1));
  }
}

TEST(PipelineSchedule, SimulatorPassesManyConfigs) {
  int checked = 0, refused = 0;
  for (int pp = 1; pp <= 8; ++pp)
    for (int v = 1; v <= 4; ++v)
      for (int m = 1; m <= 3 * pp + 3; ++m)
        for (int g = 0; g <= m; ++g) {
          if (v == 1 && g > 0) continue;  // G only matters when interleaving
          for (bool forward_only : {false, true}) {
            const ScheduleConfig c = config(pp, v, m, g, forward_only);
            const int eff = g > 0 ? g : pp;
            const bool valid = v == 1 || (pp >= 2 && megatron_accepts_interleaved(pp, m, eff));
            try {
              schedule_kind(c);
            } catch (const Error& e) {
              EXPECT_FALSE(valid) << "pp " << pp << " v " << v << " m " << m << " G " << g << ": " << e.what();
              ++refused;
              continue;
            }
            EXPECT_TRUE(valid) << "pp " << pp << " v " << v << " m " << m << " G " << g << " accepted";
            check_config(c);
            ++checked;
          }
        }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(refused, 100);
}

TEST(PipelineSchedule, InterleavedBubbleShrinksWithChunks) {
  // With G = pp and m a multiple of pp, each chunk costs 1/v of a stage: the lock-step run takes
  // 2·m·v + 2·(pp - 1) chunk ticks, a bubble of (pp - 1)/(v·m) stage-time as PTD-P says.
  for (int pp = 2; pp <= 8; ++pp)
    for (int v = 2; v <= 4; ++v)
      for (int m = pp; m <= 3 * pp; m += pp) {
        const Schedule s = build_schedule(config(pp, v, m));
        const SimulationReport report = simulate(s.config, s.ranks);
        ASSERT_TRUE(report.ok) << report.error;
        EXPECT_EQ(report.ticks, 2 * m * v + 2 * (pp - 1)) << "pp " << pp << " v " << v << " m " << m;
      }
}

TEST(PipelineSchedule, ConstraintsAreRefusedWithAMessage) {
  expect_error_mentioning([] { build_schedule(config(4, 2, 3)); },
                          "must lie between --pipeline-model-parallel-size 4 and the number of micro-batches 3; use at "
                          "least as many micro-batches");
  expect_error_mentioning([] { build_schedule(config(4, 2, 8, 3)); },
                          "--microbatch-group-size-per-virtual-pipeline-stage 3");
  expect_error_mentioning([] { build_schedule(config(4, 2, 6)); },
                          "6 micro-batches in groups of --microbatch-group-size-per-virtual-pipeline-stage 4 leave a "
                          "last group of 2, fewer than --pipeline-model-parallel-size 4");
  expect_error_mentioning([] { build_schedule(config(4, 2, 6)); }, "a group size such as 6");
  expect_error_mentioning([] { build_schedule(config(4, 2, 10, 4, true)); }, "leave a last group of 2");
  expect_error_mentioning([] { build_schedule(config(1, 2, 4)); }, "need --pipeline-model-parallel-size >= 2");
  expect_error_mentioning([] { build_schedule(config(2, 1, 0)); }, "micro-batches 0 must be >= 1");
  // m mod G >= pp is fine: 10 in groups of 4 over pp 2 leaves 2.
  EXPECT_EQ(build_schedule(config(2, 2, 10, 4)).kind, ScheduleKind::interleaved);
}

// Index of the n-th exchange in a list.
size_t nth_exchange(const std::vector<Action>& actions, int n) {
  for (size_t i = 0; i < actions.size(); ++i)
    if (actions[i].kind == Action::Kind::exchange && n-- == 0) return i;
  ADD_FAILURE() << "no exchange " << n;
  return 0;
}

SimulationReport run(const Schedule& s) { return simulate(s.config, s.ranks); }

TEST(PipelineSimulator, CatchesSwappedExchanges) {
  // Rank 0 of the hand-checked 1F1B waits for gradient 0 before sending activation 1, which
  // rank 1 needs before it can produce that gradient: a deadlock.
  Schedule s = build_schedule(config(2, 1, 3));
  std::swap(s.ranks[0][nth_exchange(s.ranks[0], 1)], s.ranks[0][nth_exchange(s.ranks[0], 2)]);
  SimulationReport report = run(s);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.error.find("deadlock"), std::string::npos) << report.error;
  EXPECT_NE(report.error.find("rank 0 action 3 X[recv grad mb 0 vs 1 <- rank 1] waits for rank 1 to send grad mb 0"),
            std::string::npos)
      << report.error;
  EXPECT_THROW(check_schedule(s), Error);
  // Rank 1 receiving activations 0 and 1 in swapped order: FIFO matching pairs mb 1's receive
  // with mb 0's send.
  s = build_schedule(config(2, 1, 3));
  std::swap(s.ranks[1][nth_exchange(s.ranks[1], 0)], s.ranks[1][nth_exchange(s.ranks[1], 1)]);
  report = run(s);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.error.find("mismatch: rank 1 action 0 X[recv act mb 1 vs 0 <- rank 0] receives act mb 1 vs 0"),
            std::string::npos)
      << report.error;
}

// Blocking send-then-receive (no batched exchange) deadlocks in 1F1B's steady state: both ranks
// send first and a rendezvous send waits for the peer's receive.
TEST(PipelineSimulator, UnbatchedSendsDeadlock) {
  Schedule s = build_schedule(config(2, 1, 3));
  for (auto& list : s.ranks) {
    std::vector<Action> split;
    for (const Action& a : list) {
      if (a.kind != Action::Kind::exchange) {
        split.push_back(a);
        continue;
      }
      for (const Transfer& t : a.sends) split.push_back(Action::exchange({t}, {}));
      for (const Transfer& t : a.recvs) split.push_back(Action::exchange({}, {t}));
    }
    list = split;
  }
  const SimulationReport report = run(s);
  EXPECT_FALSE(report.ok);
  EXPECT_NE(report.error.find("deadlock"), std::string::npos) << report.error;
}

TEST(PipelineSimulator, CatchesBrokenRules) {
  const Schedule good = build_schedule(config(3, 2, 6));
  ASSERT_TRUE(run(good).ok) << run(good).error;
  const auto expect_caught = [](const Schedule& s, const std::string& needle) {
    const SimulationReport report = run(s);
    EXPECT_FALSE(report.ok) << needle;
    EXPECT_NE(report.error.find(needle), std::string::npos) << report.error;
  };
  // A receive's identity differs from the tensor sent.
  Schedule s = good;
  Action& x = s.ranks[1][nth_exchange(s.ranks[1], 0)];
  ASSERT_FALSE(x.recvs.empty());
  x.recvs[0].microbatch += 1;
  expect_caught(s, "mismatch");
  // A send names a peer that does not hold the consuming stage.
  s = good;
  for (Action& a : s.ranks[0])
    if (a.kind == Action::Kind::exchange && !a.sends.empty()) {
      a.sends[0].peer = 2;
      break;
    }
  expect_caught(s, "go from its rank to the rank of virtual stage 1");
  // A forward runs twice; a backward runs before its forward; a backward in a forward-only run.
  s = good;
  s.ranks[2].push_back(Action::forward(0, 1));
  expect_caught(s, "this forward already ran");
  s = good;
  s.ranks[2].insert(s.ranks[2].begin(), Action::backward(0, 0));
  expect_caught(s, "runs before its forward");
  Schedule eval = build_schedule(config(3, 2, 6, 0, true));
  ASSERT_TRUE(run(eval).ok) << run(eval).error;
  eval.ranks[2].push_back(Action::backward(0, 1));
  expect_caught(eval, "a backward in a forward-only schedule");
  // A compute moved before the exchange that brings its input.
  s = good;
  std::vector<Action>& r1 = s.ranks[1];
  std::rotate(r1.begin(), r1.begin() + 1, r1.begin() + 2);  // first forward before its receive
  expect_caught(s, "runs before receiving its input activation act mb 0 vs 0");
  // A send before the forward that computes it.
  s = good;
  std::vector<Action>& r0 = s.ranks[0];
  std::rotate(r0.begin(), r0.begin() + 1, r0.begin() + 2);
  expect_caught(s, "sends act mb 0 vs 0 before computing it");
  // A dropped backward, and a dropped forward (whose received input then goes unused).
  s = good;
  std::vector<Action>& last = s.ranks[0];
  last.erase(std::find_if(last.rbegin(), last.rend(), [](const Action& a) { return a.kind == Action::Kind::backward; })
                 .base() -
             1);
  expect_caught(s, "never runs the backward of micro-batch");
  eval = build_schedule(config(3, 2, 6, 0, true));
  auto& tail = eval.ranks[2];
  tail.erase(
      std::find_if(tail.rbegin(), tail.rend(), [](const Action& a) { return a.kind == Action::Kind::forward; }).base() -
      1);
  expect_caught(eval, "never runs the forward of micro-batch 5 on chunk 1");
}

TEST(PipelineSchedule, InFlightAndBuffers) {
  // 1F1B, pp 4, m 8: stage r holds pp - r micro-batches.
  const Schedule s = build_schedule(config(4, 1, 8));
  for (int r = 0; r < 4; ++r) EXPECT_EQ(max_in_flight(s.ranks[r], 1), (std::vector<int>{4 - r}));
  // Interleaved pp 4, v 2, m 8 (G 4) on rank 0: 2·3 + 4 = 10 warm-up forwards (chunk 0: mb 0-3,
  // chunk 1: mb 0-3, chunk 0: mb 4-5), so the first steady forward (chunk 0, mb 6) holds 11, 4 of
  // them on chunk 1; the first backwards free chunk 1 while chunk 0 runs on to mb 7: 8 there.
  EXPECT_EQ(max_in_flight(build_schedule(config(4, 2, 8)).ranks[0], 2), (std::vector<int>{8, 4}));
  // Receive buffers: rank 0 of 1F1B gets each gradient one tick before its backward; a middle
  // rank can get an activation and a gradient in one exchange.
  EXPECT_EQ(max_buffered_receives(s.ranks[0], 4), 1);
  EXPECT_EQ(max_buffered_receives(s.ranks[1], 4), 2);
  // The first rank of the interleaved schedule receives wrap-around activations ahead of its
  // chunk-1 forwards.
  EXPECT_GE(max_buffered_receives(build_schedule(config(4, 2, 8)).ranks[0], 4), 2);
}

}  // namespace
}  // namespace mt
