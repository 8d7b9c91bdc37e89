// Owns the arithmetic behind ParallelGrid: order parsing, validation, the two rank generators and
// mask-based group construction (megatron/core/parallel_state.py: RankGenerator, generate_masked_orthogonal_rank_groups).
#include "parallel/grid.h"

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>

#include "base/error.h"

namespace mt {

namespace {

constexpr const char* kAxes[] = {"tp", "cp", "ep", "dp", "pp"};

std::vector<std::string> split_tokens(const std::string& text) {
  std::vector<std::string> tokens;
  std::string current;
  for (char c : text) {
    if (c == '-') {
      tokens.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  tokens.push_back(current);
  return tokens;
}

// Parses and checks the order once, so both generators see the same permutation.
std::vector<std::string> parse_order(const std::string& order) {
  const char* hint =
      " (expected a permutation of tp, cp, ep, dp, pp, fastest-varying first: Megatron's default "
      "tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping)";
  std::vector<std::string> tokens = split_tokens(order);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    MT_CHECK(std::find(std::begin(kAxes), std::end(kAxes), t) != std::end(kAxes))
        << "parallel order '" << order << "' has unknown axis '" << t << "'" << hint;
    MT_CHECK(std::find(tokens.begin(), tokens.begin() + i, t) == tokens.begin() + i)
        << "parallel order '" << order << "' names axis '" << t << "' twice" << hint;
  }
  // Megatron appends unnamed size-1 axes; we insist on all five so a typo cannot hide an axis.
  for (const char* axis : kAxes) {
    MT_CHECK(std::find(tokens.begin(), tokens.end(), axis) != tokens.end())
        << "parallel order '" << order << "' is missing axis '" << axis << "'" << hint;
  }
  return tokens;
}

ParallelGrid::Generator make_generator(const std::vector<std::string>& order, int tp, int cp, int ep,
                                       int dp, int pp) {
  ParallelGrid::Generator g;
  g.names = order;
  int stride = 1;
  for (const std::string& name : order) {
    int size = name == "tp" ? tp : name == "cp" ? cp : name == "ep" ? ep : name == "dp" ? dp : pp;
    g.sizes.push_back(size);
    g.strides.push_back(stride);
    stride *= size;
  }
  return g;
}

}  // namespace

const char* grid_role_name(GridRole role) {
  switch (role) {
    case GridRole::tp: return "tp";
    case GridRole::cp: return "cp";
    case GridRole::dp: return "dp";
    case GridRole::dp_cp: return "dp_cp";
    case GridRole::pp: return "pp";
    case GridRole::model_parallel: return "model_parallel";
    case GridRole::tp_cp: return "tp_cp";
    case GridRole::tp_dp_cp: return "tp_dp_cp";
    case GridRole::embedding: return "embedding";
    case GridRole::ep: return "ep";
    case GridRole::etp: return "etp";
    case GridRole::etp_ep: return "etp_ep";
    case GridRole::etp_ep_pp: return "etp_ep_pp";
    case GridRole::expert_dp: return "expert_dp";
  }
  return "?";
}

int ParallelGrid::Generator::axis(const std::string& name) const {
  auto it = std::find(names.begin(), names.end(), name);
  MT_CHECK(it != names.end()) << "no axis '" << name << "' in the parallel order";
  return static_cast<int>(it - names.begin());
}

std::vector<int> ParallelGrid::Generator::decompose(int rank) const {
  std::vector<int> coords(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) coords[i] = (rank / strides[i]) % sizes[i];
  return coords;
}

int ParallelGrid::Generator::compose(const std::vector<int>& coords) const {
  int rank = 0;
  for (size_t i = 0; i < sizes.size(); ++i) rank += coords[i] * strides[i];
  return rank;
}

std::vector<int> ParallelGrid::Generator::group(const std::string& token_set, int rank) const {
  std::vector<bool> in_set(sizes.size(), false);
  for (const std::string& t : split_tokens(token_set)) in_set[axis(t)] = true;
  // Fix the axes outside the set at rank's coordinates and enumerate the others, fastest axis
  // first; because strides grow with axis position this yields ranks in ascending order.
  std::vector<int> base = decompose(rank);
  std::vector<int> free_axes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (in_set[i]) {
      free_axes.push_back(static_cast<int>(i));
      base[i] = 0;
    }
  }
  std::vector<int> ranks;
  std::vector<int> coords = base;
  while (true) {
    ranks.push_back(compose(coords));
    size_t k = 0;
    for (; k < free_axes.size(); ++k) {
      int a = free_axes[k];
      if (++coords[a] < sizes[a]) break;
      coords[a] = 0;
    }
    if (k == free_axes.size()) break;
  }
  return ranks;
}

ParallelGrid::ParallelGrid(const GridConfig& config)
    : world_size_(config.world_size),
      tp_(config.tp),
      cp_(config.cp),
      ep_(config.ep),
      pp_(config.pp),
      etp_(config.etp == 0 ? config.tp : config.etp),
      order_(config.order) {
  MT_CHECK(world_size_ >= 1) << "world size is " << world_size_ << "; it must be at least 1";
  MT_CHECK(tp_ >= 1) << "--tensor-model-parallel-size is " << tp_ << "; it must be at least 1";
  MT_CHECK(cp_ >= 1) << "--context-parallel-size is " << cp_ << "; it must be at least 1";
  MT_CHECK(ep_ >= 1) << "--expert-model-parallel-size is " << ep_ << "; it must be at least 1";
  MT_CHECK(pp_ >= 1) << "--pipeline-model-parallel-size is " << pp_ << "; it must be at least 1";
  MT_CHECK(etp_ >= 1) << "--expert-tensor-parallel-size is " << etp_ << "; it must be at least 1";
  const int model = tp_ * cp_ * pp_, expert_model = etp_ * ep_ * pp_;
  // The fewest ranks both layouts fit, for the hint of how to launch them.
  const int fewest = std::lcm(model, expert_model);
  const std::string launch = "; start a multiple of " + std::to_string(fewest) + " ranks (mpirun -np " +
                             std::to_string(fewest) + " ...) or change the degrees";
  MT_CHECK(world_size_ % model == 0)
      << "world size " << world_size_ << " is not divisible by --tensor-model-parallel-size (" << tp_
      << ") x --context-parallel-size (" << cp_ << ") x --pipeline-model-parallel-size (" << pp_
      << ") = " << model << launch;
  dp_ = world_size_ / model;
  MT_CHECK(world_size_ % expert_model == 0)
      << "world size " << world_size_ << " is not divisible by --expert-tensor-parallel-size (" << etp_
      << ") x --expert-model-parallel-size (" << ep_ << ") x --pipeline-model-parallel-size (" << pp_
      << ") = " << expert_model << launch;
  expert_dp_ = world_size_ / expert_model;

  std::vector<std::string> axes = parse_order(order_);
  dense_ = make_generator(axes, tp_, cp_, 1, dp_, pp_);
  expert_ = make_generator(axes, etp_, 1, ep_, expert_dp_, pp_);

  // Megatron asserts both generators give the same pp groups: a pipeline stage must hold the same
  // ranks for dense and expert layers. With pp last this always holds; with pp before dp (the
  // tp-pp-dp mapping) it needs tp·cp == etp·ep (the pp stride in each generator).
  for (int r = 0; r < world_size_; ++r) {
    MT_CHECK(dense_.group("pp", r) == expert_.group("pp", r))
        << "expert layout (--expert-tensor-parallel-size " << etp_ << ", --expert-model-parallel-size "
        << ep_ << ") gives different pipeline groups from the dense layout (--tensor-model-parallel-size "
        << tp_ << ", --context-parallel-size " << cp_ << ") under order " << order_
        << "; with pp before dp, etp x ep must equal tp x cp (or drop --use-tp-pp-dp-mapping)";
  }
}

void ParallelGrid::check_rank(int rank) const {
  MT_CHECK(rank >= 0 && rank < world_size_) << "rank " << rank << " is outside the world of " << world_size_;
}

DenseCoords ParallelGrid::dense_coords(int rank) const {
  check_rank(rank);
  std::vector<int> c = dense_.decompose(rank);
  return {c[dense_.axis("tp")], c[dense_.axis("cp")], c[dense_.axis("dp")], c[dense_.axis("pp")]};
}

int ParallelGrid::dense_rank(const DenseCoords& coords) const {
  MT_CHECK(coords.tp >= 0 && coords.tp < tp_ && coords.cp >= 0 && coords.cp < cp_ && coords.dp >= 0 &&
           coords.dp < dp_ && coords.pp >= 0 && coords.pp < pp_)
      << "dense coordinates (tp " << coords.tp << ", cp " << coords.cp << ", dp " << coords.dp << ", pp "
      << coords.pp << ") are outside the grid";
  std::vector<int> c(5, 0);
  c[dense_.axis("tp")] = coords.tp;
  c[dense_.axis("cp")] = coords.cp;
  c[dense_.axis("dp")] = coords.dp;
  c[dense_.axis("pp")] = coords.pp;
  return dense_.compose(c);
}

ExpertCoords ParallelGrid::expert_coords(int rank) const {
  check_rank(rank);
  std::vector<int> c = expert_.decompose(rank);
  return {c[expert_.axis("tp")], c[expert_.axis("ep")], c[expert_.axis("dp")], c[expert_.axis("pp")]};
}

int ParallelGrid::expert_rank(const ExpertCoords& coords) const {
  MT_CHECK(coords.etp >= 0 && coords.etp < etp_ && coords.ep >= 0 && coords.ep < ep_ &&
           coords.expert_dp >= 0 && coords.expert_dp < expert_dp_ && coords.pp >= 0 && coords.pp < pp_)
      << "expert coordinates (etp " << coords.etp << ", ep " << coords.ep << ", expert_dp "
      << coords.expert_dp << ", pp " << coords.pp << ") are outside the grid";
  std::vector<int> c(5, 0);
  c[expert_.axis("tp")] = coords.etp;
  c[expert_.axis("ep")] = coords.ep;
  c[expert_.axis("dp")] = coords.expert_dp;
  c[expert_.axis("pp")] = coords.pp;
  return expert_.compose(c);
}

std::vector<int> ParallelGrid::group(GridRole role, int rank) const {
  check_rank(rank);
  switch (role) {
    case GridRole::tp: return dense_.group("tp", rank);
    case GridRole::cp: return dense_.group("cp", rank);
    case GridRole::dp: return dense_.group("dp", rank);
    case GridRole::dp_cp: return dense_.group("dp-cp", rank);
    case GridRole::pp: return dense_.group("pp", rank);
    case GridRole::model_parallel: return dense_.group("tp-pp", rank);
    case GridRole::tp_cp: return dense_.group("tp-cp", rank);
    case GridRole::tp_dp_cp: return dense_.group("tp-dp-cp", rank);
    case GridRole::embedding: {
      // Tied input/output embeddings live on the first and last stage, which all-reduce their grads.
      // Middle stages belong to no embedding group: they get an empty list.
      std::vector<int> pp_ranks = dense_.group("pp", rank);
      if (rank != pp_ranks.front() && rank != pp_ranks.back()) return {};
      if (pp_ranks.size() == 1) return pp_ranks;
      return {pp_ranks.front(), pp_ranks.back()};
    }
    case GridRole::ep: return expert_.group("ep", rank);
    case GridRole::etp: return expert_.group("tp", rank);
    case GridRole::etp_ep: return expert_.group("tp-ep", rank);
    case GridRole::etp_ep_pp: return expert_.group("tp-ep-pp", rank);
    case GridRole::expert_dp: return expert_.group("dp", rank);
  }
  MT_FAIL() << "unknown grid role";
}

int ParallelGrid::rank_in_group(GridRole role, int rank) const {
  std::vector<int> g = group(role, rank);
  auto it = std::find(g.begin(), g.end(), rank);
  MT_CHECK(it != g.end()) << "rank " << rank << " is not in an " << grid_role_name(role)
                          << " group (only pp-first and pp-last ranks have one)";
  return static_cast<int>(it - g.begin());
}

std::vector<std::vector<int>> ParallelGrid::all_groups(GridRole role) const {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(world_size_, false);
  for (int r = 0; r < world_size_; ++r) {
    if (seen[r]) continue;
    if (role == GridRole::embedding && !is_pp_first(r) && !is_pp_last(r)) continue;
    std::vector<int> g = group(role, r);
    for (int member : g) seen[member] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

int ParallelGrid::pp_next_rank(int rank) const {
  std::vector<int> g = group(GridRole::pp, rank);
  int i = rank_in_group(GridRole::pp, rank);
  return g[(i + 1) % g.size()];
}

int ParallelGrid::pp_prev_rank(int rank) const {
  std::vector<int> g = group(GridRole::pp, rank);
  int i = rank_in_group(GridRole::pp, rank);
  return g[(i + static_cast<int>(g.size()) - 1) % g.size()];
}

}  // namespace mt
