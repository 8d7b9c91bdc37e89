// parallel/grid: ParallelGrid's groups against the examples of reference §1.1 (Megatron's
// parallel_state.py), hand-computed layouts for cp and the tp-pp-dp mapping, coverage and
// round-trip properties over many layouts, and the validation messages.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "parallel/grid.h"
#include "testing.h"

namespace mt {
namespace {

using Groups = std::vector<std::vector<int>>;

GridConfig config(int world, int tp, int cp, int ep, int pp, int etp = 0, std::string order = kDefaultGridOrder) {
  GridConfig c;
  c.world_size = world;
  c.tp = tp;
  c.cp = cp;
  c.ep = ep;
  c.pp = pp;
  c.etp = etp;
  c.order = order;
  return c;
}

// Runs `make` and expects an mt::Error whose message contains `needle`.
void expect_error(const std::function<void()>& make, const std::string& needle) {
  try {
    make();
    ADD_FAILURE() << "expected an mt::Error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Reference §1.1: W=8, TP=2, PP=2 under the default tp-cp-ep-dp-pp order (rank = tp + 2·(dp + 2·pp)).
TEST(ParallelGrid, MegatronExampleTp2Pp2) {
  ParallelGrid g(config(8, 2, 1, 1, 2));
  EXPECT_EQ(g.dp(), 2);
  EXPECT_EQ(g.all_groups(GridRole::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::dp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // cp = 1: dp_cp is dp and cp groups are singletons.
  EXPECT_EQ(g.all_groups(GridRole::dp_cp), g.all_groups(GridRole::dp));
  EXPECT_EQ(g.all_groups(GridRole::cp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  // Model parallel = tp-pp: ranks sharing a dp index.
  EXPECT_EQ(g.all_groups(GridRole::model_parallel), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // tp-dp-cp: everything within one pipeline stage.
  EXPECT_EQ(g.all_groups(GridRole::tp_dp_cp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // pp = 2: the embedding group is the whole pp group (first and last stage).
  EXPECT_EQ(g.all_groups(GridRole::embedding), g.all_groups(GridRole::pp));
  EXPECT_EQ(g.group(GridRole::dp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.rank_in_group(GridRole::dp, 7), 1);
  EXPECT_EQ(g.dense_coords(6), (DenseCoords{0, 0, 1, 1}));
  // Default etp = tp, ep = 1: expert groups mirror the dense ones.
  EXPECT_EQ(g.etp(), 2);
  EXPECT_EQ(g.expert_dp(), 2);
  EXPECT_EQ(g.all_groups(GridRole::etp), g.all_groups(GridRole::tp));
  EXPECT_EQ(g.all_groups(GridRole::expert_dp), g.all_groups(GridRole::dp));
}

// Reference §1.1: the same world with EP=4, ETP=1 gives EDP = 8/(1·4·2) = 1 and EP groups [0..3][4..7]
// (expert rank = etp + 1·(ep + 4·(edp + 1·pp))).
TEST(ParallelGrid, MegatronExampleExpertEp4Etp1) {
  ParallelGrid g(config(8, 2, 1, 4, 2, 1));
  EXPECT_EQ(g.expert_dp(), 1);
  EXPECT_EQ(g.all_groups(GridRole::ep), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::etp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(g.all_groups(GridRole::expert_dp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(g.all_groups(GridRole::etp_ep), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::etp_ep_pp), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(g.expert_coords(6), (ExpertCoords{0, 2, 0, 1}));
  // Dense groups are unchanged by the expert layout.
  EXPECT_EQ(g.all_groups(GridRole::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::pp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// --use-tp-pp-dp-mapping: order tp-cp-ep-pp-dp, W=8, TP=2, PP=2, DP=2, so rank = tp + 2·(pp + 2·dp):
//   tp varies with stride 1 -> [0,1][2,3][4,5][6,7]
//   pp varies with stride 2 -> [0,2][1,3][4,6][5,7]
//   dp varies with stride 4 -> [0,4][1,5][2,6][3,7]
//   tp-pp (model parallel): strides 1 and 2 -> [0,1,2,3][4,5,6,7]
TEST(ParallelGrid, TpPpDpMapping) {
  ParallelGrid g(config(8, 2, 1, 1, 2, 0, kTpPpDpGridOrder));
  EXPECT_EQ(g.order(), "tp-cp-ep-pp-dp");
  EXPECT_EQ(g.all_groups(GridRole::tp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::pp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::model_parallel), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(g.dense_coords(6), (DenseCoords{0, 0, 1, 1}));
  EXPECT_EQ(g.pp_next_rank(1), 3);
  EXPECT_EQ(g.pp_next_rank(3), 1);

  // Experts under this order: ETP=1, EP=2 keeps the pp stride etp·ep = 2 = tp·cp, so the pp groups
  // match; EDP = 8/(1·2·2) = 2 and expert rank = etp + 1·(ep + 2·(pp + 2·edp)):
  //   ep stride 1 -> [0,1][2,3][4,5][6,7]; expert_dp stride 4 -> [0,4][1,5][2,6][3,7].
  ParallelGrid e(config(8, 2, 1, 2, 2, 1, kTpPpDpGridOrder));
  EXPECT_EQ(e.expert_dp(), 2);
  EXPECT_EQ(e.all_groups(GridRole::ep), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(e.all_groups(GridRole::expert_dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// CP=2: W=8, TP=2, CP=2, PP=1, DP=2, rank = tp + 2·(cp + 2·dp):
//   cp stride 2 -> [0,2][1,3][4,6][5,7]; dp stride 4 -> [0,4][1,5][2,6][3,7];
//   dp-cp (dense grad all-reduce) -> [0,2,4,6][1,3,5,7]; tp-cp -> [0,1,2,3][4,5,6,7].
TEST(ParallelGrid, ContextParallelGroups) {
  ParallelGrid g(config(8, 2, 2, 1, 1));
  EXPECT_EQ(g.dp(), 2);
  EXPECT_EQ(g.all_groups(GridRole::cp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::dp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::dp_cp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::tp_cp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(g.all_groups(GridRole::tp_dp_cp), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // The expert generator has cp fixed 1, so cp ranks fold into expert_dp: EDP = 8/(2·1·1) = 4.
  EXPECT_EQ(g.expert_dp(), 4);
  EXPECT_EQ(g.all_groups(GridRole::expert_dp), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  // pp = 1: every rank is its own pp group and embedding group, and its own pipeline neighbour.
  EXPECT_EQ(g.all_groups(GridRole::embedding), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(g.pp_next_rank(5), 5);
  EXPECT_EQ(g.pp_prev_rank(5), 5);
}

// PP=4 with W=8, TP=2 (rank = tp + 2·pp): pipelines [0,2,4,6] and [1,3,5,7]; neighbours wrap around
// as in Megatron, and only the first and last stages are in the embedding group.
TEST(ParallelGrid, PipelineNeighboursAndEmbedding) {
  ParallelGrid g(config(8, 2, 1, 1, 4));
  EXPECT_EQ(g.group(GridRole::pp, 4), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(g.pp_next_rank(2), 4);
  EXPECT_EQ(g.pp_prev_rank(2), 0);
  EXPECT_EQ(g.pp_next_rank(6), 0);
  EXPECT_EQ(g.pp_prev_rank(0), 6);
  EXPECT_TRUE(g.is_pp_first(1));
  EXPECT_TRUE(g.is_pp_last(7));
  EXPECT_FALSE(g.is_pp_last(5));
  EXPECT_EQ(g.group(GridRole::embedding, 0), (std::vector<int>{0, 6}));
  EXPECT_EQ(g.group(GridRole::embedding, 7), (std::vector<int>{1, 7}));
  EXPECT_TRUE(g.group(GridRole::embedding, 2).empty());
  EXPECT_EQ(g.all_groups(GridRole::embedding), (Groups{{0, 6}, {1, 7}}));
  expect_error([&] { g.rank_in_group(GridRole::embedding, 4); }, "embedding");
}

// Properties over many layouts and both orders: coordinates round-trip; each rank is in exactly one
// group of each role; each group is exactly "the ranks agreeing on every axis outside the set",
// checked by brute force over coordinates; group sizes equal the product of the set's degrees.
TEST(ParallelGrid, PropertiesOverLayouts) {
  struct Layout {
    int world, tp, cp, ep, pp, etp;
  };
  const std::vector<Layout> layouts = {
      {1, 1, 1, 1, 1, 0},  {8, 2, 1, 1, 2, 0},  {8, 2, 1, 4, 2, 1},  {16, 2, 2, 1, 2, 0},
      {24, 2, 1, 2, 3, 1}, {32, 2, 2, 4, 2, 1}, {32, 4, 1, 2, 2, 2}, {48, 2, 3, 2, 2, 0},
      {16, 1, 2, 2, 4, 1}, {12, 3, 1, 1, 1, 0}};
  const std::vector<GridRole> roles = {GridRole::tp,       GridRole::cp,        GridRole::dp,
                                       GridRole::dp_cp,    GridRole::pp,        GridRole::model_parallel,
                                       GridRole::tp_cp,    GridRole::tp_dp_cp,  GridRole::ep,
                                       GridRole::etp,      GridRole::etp_ep,    GridRole::etp_ep_pp,
                                       GridRole::expert_dp};
  for (const char* order : {kDefaultGridOrder, kTpPpDpGridOrder}) {
    for (const Layout& l : layouts) {
      GridConfig c = config(l.world, l.tp, l.cp, l.ep, l.pp, l.etp, order);
      int etp = l.etp == 0 ? l.tp : l.etp;
      // The tp-pp-dp order needs matching pp strides; skip layouts Megatron would reject there.
      if (std::string(order) == kTpPpDpGridOrder && l.pp > 1 && l.tp * l.cp != etp * l.ep) continue;
      ParallelGrid g(c);
      SCOPED_TRACE(std::string(order) + " world " + std::to_string(l.world));
      for (int r = 0; r < l.world; ++r) {
        EXPECT_EQ(g.dense_rank(g.dense_coords(r)), r);
        EXPECT_EQ(g.expert_rank(g.expert_coords(r)), r);
        // Dense and expert views of a rank agree on its pipeline stage.
        EXPECT_EQ(g.dense_coords(r).pp, g.expert_coords(r).pp);
      }
      for (GridRole role : roles) {
        SCOPED_TRACE(grid_role_name(role));
        std::vector<int> count(l.world, 0);
        for (const auto& group : g.all_groups(role)) {
          EXPECT_TRUE(std::is_sorted(group.begin(), group.end()));
          for (int member : group) {
            ++count[member];
            EXPECT_EQ(g.group(role, member), group);
            EXPECT_EQ(g.group(role, member)[g.rank_in_group(role, member)], member);
          }
        }
        for (int r = 0; r < l.world; ++r) EXPECT_EQ(count[r], 1) << "rank " << r;
      }
      // Brute force: members of r's group are exactly the ranks agreeing on the other axes.
      auto check = [&](GridRole role, auto same_outside, int size) {
        for (int r = 0; r < l.world; ++r) {
          std::vector<int> expected;
          for (int s = 0; s < l.world; ++s)
            if (same_outside(r, s)) expected.push_back(s);
          EXPECT_EQ(g.group(role, r), expected) << grid_role_name(role) << " rank " << r;
          EXPECT_EQ(static_cast<int>(expected.size()), size) << grid_role_name(role);
        }
      };
      auto d = [&](int r) { return g.dense_coords(r); };
      auto e = [&](int r) { return g.expert_coords(r); };
      check(GridRole::tp, [&](int a, int b) { return d(a).cp == d(b).cp && d(a).dp == d(b).dp && d(a).pp == d(b).pp; }, g.tp());
      check(GridRole::cp, [&](int a, int b) { return d(a).tp == d(b).tp && d(a).dp == d(b).dp && d(a).pp == d(b).pp; }, g.cp());
      check(GridRole::dp, [&](int a, int b) { return d(a).tp == d(b).tp && d(a).cp == d(b).cp && d(a).pp == d(b).pp; }, g.dp());
      check(GridRole::pp, [&](int a, int b) { return d(a).tp == d(b).tp && d(a).cp == d(b).cp && d(a).dp == d(b).dp; }, g.pp());
      check(GridRole::dp_cp, [&](int a, int b) { return d(a).tp == d(b).tp && d(a).pp == d(b).pp; }, g.dp() * g.cp());
      check(GridRole::model_parallel, [&](int a, int b) { return d(a).cp == d(b).cp && d(a).dp == d(b).dp; }, g.tp() * g.pp());
      check(GridRole::tp_dp_cp, [&](int a, int b) { return d(a).pp == d(b).pp; }, l.world / g.pp());
      check(GridRole::ep, [&](int a, int b) { return e(a).etp == e(b).etp && e(a).expert_dp == e(b).expert_dp && e(a).pp == e(b).pp; }, g.ep());
      check(GridRole::etp, [&](int a, int b) { return e(a).ep == e(b).ep && e(a).expert_dp == e(b).expert_dp && e(a).pp == e(b).pp; }, g.etp());
      check(GridRole::expert_dp, [&](int a, int b) { return e(a).etp == e(b).etp && e(a).ep == e(b).ep && e(a).pp == e(b).pp; }, g.expert_dp());
    }
  }
}

TEST(ParallelGrid, BadLayoutsNameTheFlag) {
  expect_error([] { ParallelGrid(config(6, 4, 1, 1, 1)); }, "--tensor-model-parallel-size");
  expect_error([] { ParallelGrid(config(8, 2, 3, 1, 1)); }, "--context-parallel-size");
  expect_error([] { ParallelGrid(config(8, 1, 1, 1, 3)); }, "--pipeline-model-parallel-size");
  expect_error([] { ParallelGrid(config(8, 2, 1, 3, 1)); }, "--expert-model-parallel-size");
  expect_error([] { ParallelGrid(config(8, 2, 1, 2, 1, 3)); }, "--expert-tensor-parallel-size");
  expect_error([] { ParallelGrid(config(8, 0, 1, 1, 1)); }, "--tensor-model-parallel-size is 0");
  expect_error([] { ParallelGrid(config(0, 1, 1, 1, 1)); }, "world size");
  expect_error([] { ParallelGrid(config(8, 2, 1, 1, 2, 0, "tp-cp-ep-dp-xx")); }, "unknown axis 'xx'");
  expect_error([] { ParallelGrid(config(8, 2, 1, 1, 2, 0, "tp-tp-ep-dp-pp")); }, "names axis 'tp' twice");
  expect_error([] { ParallelGrid(config(8, 2, 1, 1, 2, 0, "tp-cp-dp-pp")); }, "missing axis 'ep'");
  expect_error([] { ParallelGrid(config(8, 2, 1, 1, 2, 0, "")); }, "--use-tp-pp-dp-mapping");
  // tp-pp-dp order with etp·ep (4) != tp·cp (2): dense and expert pp groups would differ.
  expect_error([] { ParallelGrid(config(8, 2, 1, 2, 2, 2, kTpPpDpGridOrder)); }, "--use-tp-pp-dp-mapping");
  ParallelGrid g(config(8, 2, 1, 1, 2));
  expect_error([&] { g.group(GridRole::tp, 8); }, "outside the world");
  expect_error([&] { g.dense_rank({2, 0, 0, 0}); }, "outside the grid");
}

}  // namespace
}  // namespace mt
