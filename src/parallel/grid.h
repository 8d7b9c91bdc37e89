// Owns ParallelGrid: the parallel degrees (tp, cp, ep, dp, pp, etp, expert_dp), Megatron's rank order,
// layout validation, rank <-> coordinate maps for the dense and the expert rank generators, and the
// process groups by role (tp, cp, dp, dp_cp, pp, model-parallel, embedding, ep, etp, expert_dp, ...).
// Pure arithmetic: no communicator, no MPI. comm/ turns these rank lists into communicators.
//
// Semantics follow megatron/core/parallel_state.py (RankGenerator): the order string lists axes
// fastest-varying first; a group for a token set (e.g. "tp-dp") is every rank that agrees on all
// axes not in the set. Groups are listed in ascending rank order, which is also Megatron's order
// (mixed-radix enumeration with prefix-product strides is monotone).
#pragma once

#include <string>
#include <vector>

namespace mt {

// Megatron's default order and the one `--use-tp-pp-dp-mapping` selects.
inline constexpr const char* kDefaultGridOrder = "tp-cp-ep-dp-pp";
inline constexpr const char* kTpPpDpGridOrder = "tp-cp-ep-pp-dp";

struct GridConfig {
  int world_size = 1;
  int tp = 1;  // --tensor-model-parallel-size
  int cp = 1;  // --context-parallel-size
  int ep = 1;  // --expert-model-parallel-size
  int pp = 1;  // --pipeline-model-parallel-size
  int etp = 0;  // --expert-tensor-parallel-size; 0 means "same as tp" (Megatron's default)
  std::string order = kDefaultGridOrder;
};

// The roles a rank has a group for. Dense roles come from the dense generator (ep fixed 1), expert
// roles from the expert generator (tp := etp, dp := expert_dp, cp fixed 1).
enum class GridRole {
  tp,              // "tp"
  cp,              // "cp"
  dp,              // "dp"
  dp_cp,           // "dp-cp": dense gradient all-reduce (cp ranks hold identical weights)
  pp,              // "pp"
  model_parallel,  // "tp-pp"
  tp_cp,           // "tp-cp"
  tp_dp_cp,        // "tp-dp-cp"
  embedding,       // first and last rank of the pp group (tied embedding grads); just the first if pp=1
  ep,              // expert "ep"
  etp,             // expert "tp"
  etp_ep,          // expert "tp-ep"
  etp_ep_pp,       // expert "tp-ep-pp"
  expert_dp,       // expert "dp": expert gradient all-reduce
};

const char* grid_role_name(GridRole role);

struct DenseCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const DenseCoords&) const = default;
};

struct ExpertCoords {
  int etp = 0, ep = 0, expert_dp = 0, pp = 0;
  bool operator==(const ExpertCoords&) const = default;
};

class ParallelGrid {
 public:
  // Validates the layout; throws mt::Error naming the offending Megatron flag.
  explicit ParallelGrid(const GridConfig& config);

  int world_size() const { return world_size_; }
  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int ep() const { return ep_; }
  int pp() const { return pp_; }
  int dp() const { return dp_; }  // world / (tp·cp·pp)
  int etp() const { return etp_; }
  int expert_dp() const { return expert_dp_; }  // world / (etp·ep·pp)
  const std::string& order() const { return order_; }

  DenseCoords dense_coords(int rank) const;
  int dense_rank(const DenseCoords& coords) const;
  ExpertCoords expert_coords(int rank) const;
  int expert_rank(const ExpertCoords& coords) const;

  // The group of `role` that contains `rank`, ascending; empty for `embedding` on a middle pp stage.
  std::vector<int> group(GridRole role, int rank) const;
  // Position of `rank` inside its group of `role` (the rank a communicator over that group gives it).
  int rank_in_group(GridRole role, int rank) const;
  // Every group of `role`, ordered by their smallest rank; each world rank appears in exactly one
  // group, except for `embedding`, which covers only the pp-first and pp-last ranks.
  std::vector<std::vector<int>> all_groups(GridRole role) const;

  // Pipeline neighbours, wrapping around as Megatron's get_pipeline_model_parallel_next/prev_rank.
  int pp_next_rank(int rank) const;
  int pp_prev_rank(int rank) const;
  bool is_pp_first(int rank) const { return dense_coords(rank).pp == 0; }
  bool is_pp_last(int rank) const { return dense_coords(rank).pp == pp_ - 1; }

  // One of Megatron's two RankGenerators: axes in order (fastest first) with their sizes.
  struct Generator {
    std::vector<std::string> names;  // the five axes: tp cp ep dp pp, permuted by the order string
    std::vector<int> sizes;
    std::vector<int> strides;  // prefix products of sizes
    int axis(const std::string& name) const;
    std::vector<int> decompose(int rank) const;
    int compose(const std::vector<int>& coords) const;
    // The group containing `rank` for the '-'-separated token set, ascending.
    std::vector<int> group(const std::string& token_set, int rank) const;
  };

 private:
  void check_rank(int rank) const;

  int world_size_, tp_, cp_, ep_, pp_, dp_, etp_, expert_dp_;
  std::string order_;
  Generator dense_, expert_;
};

}  // namespace mt
