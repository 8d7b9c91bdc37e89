// Owns the layer partition over (pipeline rank, model chunk) and its error messages; see
// partition.h for the rules and the Megatron sources they follow.
#include "pipeline/partition.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>

#include "base/error.h"
#include "pipeline/layout_string.h"

namespace mt {
namespace {

int64_t places_of(const PartitionConfig& c) {
  return c.num_layers + (c.account_for_embedding ? 1 : 0) + (c.account_for_loss ? 1 : 0);
}

// "--num-layers 10", or "--num-layers 10 + 1 (embedding) + 1 (loss) = 12 places".
std::string describe_places(const PartitionConfig& c) {
  std::ostringstream s;
  s << "--num-layers " << c.num_layers;
  if (c.account_for_embedding) s << " + 1 (--account-for-embedding-in-pipeline-split)";
  if (c.account_for_loss) s << " + 1 (--account-for-loss-in-pipeline-split)";
  if (places_of(c) != c.num_layers) s << " = " << places_of(c) << " places";
  return s.str();
}

// "--num-layers 8 or 12": the nearest layer counts whose places are a multiple of `multiple`.
std::string suggest_num_layers(const PartitionConfig& c, int64_t multiple) {
  const int64_t extra = places_of(c) - c.num_layers;
  const int64_t down = (places_of(c) / multiple) * multiple - extra;
  const int64_t up = (places_of(c) / multiple + 1) * multiple - extra;
  std::ostringstream s;
  s << "--num-layers ";
  if (down >= 1 && down != c.num_layers) s << down << " or ";
  s << up;
  return s.str();
}

// A balanced uneven split of n layers over pp ranks with v chunks each: the middle ranks get
// s layers, the first and last share the rest (each at least v, at most about s); all multiples
// of v. None when there are too few layers or n is not a multiple of v.
std::optional<std::pair<int64_t, int64_t>> suggest_uneven(int64_t n, int pp, int v) {
  if (pp < 2 || n % v != 0) return std::nullopt;
  const int64_t units = n / v;
  const int64_t middle_ranks = pp - 2;
  for (int64_t s = (units + pp - 1) / pp; s >= 1; --s) {
    const int64_t rest = units - s * middle_ranks;
    if (rest >= 2) return std::make_pair(rest / 2 * v, (rest - rest / 2) * v);
    if (middle_ranks == 0) break;
  }
  return std::nullopt;
}

std::string uneven_hint(int64_t n, int pp, int v) {
  const auto split = suggest_uneven(n, pp, v);
  if (!split) return "";
  std::ostringstream s;
  s << "--decoder-first-pipeline-num-layers " << split->first << " --decoder-last-pipeline-num-layers "
    << split->second;
  return s.str();
}

// The even split's requirement: places divide over pp ranks (and, per rank, over v chunks).
void check_even_split(const PartitionConfig& c, int v, const char* v_flag) {
  const int64_t places = places_of(c);
  const bool plain = !c.account_for_embedding && !c.account_for_loss;
  // With interleaving the uneven split must be expressed with --num-virtual-stages-per-pipeline-rank.
  const bool can_uneven = plain && !c.layers_per_virtual_stage;
  const std::string uneven = can_uneven ? uneven_hint(c.num_layers, c.pp, v) : "";
  MT_CHECK(places % c.pp == 0) << describe_places(c) << " is not divisible by --pipeline-model-parallel-size " << c.pp
                               << " (the layers are split evenly over the pipeline ranks); try "
                               << suggest_num_layers(c, static_cast<int64_t>(c.pp) * v)
                               << (uneven.empty() ? "" : ", or an uneven split: " + uneven);
  const int64_t per_rank = places / c.pp;
  MT_CHECK(per_rank % v == 0) << describe_places(c) << " over --pipeline-model-parallel-size " << c.pp << " gives "
                              << per_rank << " per rank, which is not divisible by " << v_flag << " " << v
                              << " (each model chunk gets the same number); try "
                              << suggest_num_layers(c, static_cast<int64_t>(c.pp) * v)
                              << (uneven.empty() ? "" : ", or an uneven split: " + uneven);
}

// Layer counts per rank (places, for the even split) under the uneven split.
std::vector<int64_t> uneven_rank_layers(const PartitionConfig& c, int v) {
  MT_CHECK(!c.account_for_embedding && !c.account_for_loss)
      << "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers cannot be combined with "
         "--account-for-embedding-in-pipeline-split or --account-for-loss-in-pipeline-split; use one or the other";
  const int64_t n = c.num_layers;
  const std::string hint = uneven_hint(n, c.pp, v);
  const std::string try_hint = hint.empty() ? "" : "; try " + hint;
  const auto check_end = [&](const std::optional<int64_t>& layers, const char* flag) {
    if (!layers) return;
    MT_CHECK(*layers > 0) << flag << " " << *layers << " must be > 0" << try_hint;
    MT_CHECK(*layers % v == 0) << flag << " " << *layers << " is not divisible by the " << v
                               << " virtual stages per pipeline rank (each model chunk gets the same number)"
                               << try_hint;
  };
  check_end(c.first_stage_layers, "--decoder-first-pipeline-num-layers");
  check_end(c.last_stage_layers, "--decoder-last-pipeline-num-layers");
  if (c.pp == 1) {
    // One rank is both the first and the last: a count given must be all the layers.
    for (const auto& layers : {c.first_stage_layers, c.last_stage_layers})
      MT_CHECK(!layers || *layers == n) << "with --pipeline-model-parallel-size 1 the only stage holds all "
                                        << "--num-layers " << n << ", not " << *layers
                                        << "; drop --decoder-first/last-pipeline-num-layers";
    return {n};
  }
  const int64_t first = c.first_stage_layers.value_or(0);
  const int64_t last = c.last_stage_layers.value_or(0);
  const int middle_ranks = c.pp - (c.first_stage_layers ? 1 : 0) - (c.last_stage_layers ? 1 : 0);
  const int64_t middle = n - first - last;
  std::ostringstream numbers;
  numbers << "--num-layers " << n;
  if (c.first_stage_layers) numbers << " - " << first << " (--decoder-first-pipeline-num-layers)";
  if (c.last_stage_layers) numbers << " - " << last << " (--decoder-last-pipeline-num-layers)";
  numbers << " = " << middle << " layers";
  int64_t per_middle = 0;
  if (middle_ranks == 0) {
    MT_CHECK(middle == 0) << numbers.str() << " are left over, but --pipeline-model-parallel-size " << c.pp
                          << " has no middle ranks to hold them" << try_hint;
  } else {
    // Megatron requires layers on every middle rank (transformer_config.py).
    MT_CHECK(middle >= middle_ranks && middle % middle_ranks == 0)
        << numbers.str() << " do not split evenly, at least one each, over the " << middle_ranks
        << " middle pipeline ranks" << try_hint;
    per_middle = middle / middle_ranks;
    MT_CHECK(per_middle % v == 0) << numbers.str() << " give " << per_middle << " per middle pipeline rank, which is "
                                  << "not divisible by the " << v << " virtual stages per pipeline rank" << try_hint;
  }
  std::vector<int64_t> per_rank(c.pp, per_middle);
  if (c.first_stage_layers) per_rank.front() = first;
  if (c.last_stage_layers) per_rank.back() = last;
  return per_rank;
}

// --pipeline-model-parallel-layout: the virtual stages as spelled out, checked as Megatron checks
// them (one embedding first, one loss last, every layer placed once).
PipelinePartition partition_from_layout(const PartitionConfig& c, int v) {
  const std::string flag = "--pipeline-model-parallel-layout " + *c.layout;
  const std::vector<std::string> stages = parse_pipeline_layout(*c.layout);
  PipelinePartition p;
  p.pp = c.pp;
  p.vp = v;
  int64_t next = 0;
  std::string all;
  for (const std::string& s : stages) all += s;
  if (all.find('m') != std::string::npos)
    MT_FAIL() << flag << " is not implemented in megatron.cpp: multi-token prediction layers (m), DeepSeek-V3 "
              << "layers (multi-latent attention, multi-token prediction, YaRN) (planned)";
  MT_CHECK(!all.empty() && all.front() == 'E' && all.find('E', 1) == std::string::npos)
      << flag << ": the embedding (E) must come first, once";
  MT_CHECK(all.back() == 'L' && all.find('L') == all.size() - 1) << flag << ": the loss (L) must come last, once";
  for (size_t s = 0; s < stages.size(); ++s) {
    const int64_t count = static_cast<int64_t>(std::count(stages[s].begin(), stages[s].end(), 't'));
    p.stages.push_back({next, next + count, s == 0, s + 1 == stages.size()});
    next += count;
  }
  MT_CHECK(next == c.num_layers) << flag << " places " << next << " transformer layers (t) but --num-layers is "
                                 << c.num_layers;
  return p;
}

}  // namespace

int virtual_pipeline_size(const PartitionConfig& c) {
  MT_CHECK(c.pp >= 1) << "--pipeline-model-parallel-size " << c.pp << " must be >= 1";
  MT_CHECK(c.num_layers >= 1) << "--num-layers " << c.num_layers << " must be >= 1";
  MT_CHECK(!(c.layers_per_virtual_stage && c.virtual_stages_per_rank))
      << "give at most one of --num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank";
  int v = 1;
  if (c.layout) {
    MT_CHECK(!c.layers_per_virtual_stage && !c.virtual_stages_per_rank && !c.first_stage_layers &&
             !c.last_stage_layers && !c.account_for_embedding && !c.account_for_loss)
        << "--pipeline-model-parallel-layout places every layer itself: drop --num-layers-per-virtual-pipeline-stage, "
           "--num-virtual-stages-per-pipeline-rank, --decoder-first/last-pipeline-num-layers and "
           "--account-for-embedding/loss-in-pipeline-split";
    const size_t stages = parse_pipeline_layout(*c.layout).size();
    MT_CHECK(stages % static_cast<size_t>(c.pp) == 0)
        << "--pipeline-model-parallel-layout " << *c.layout << " has " << stages
        << " stages, not a multiple of --pipeline-model-parallel-size " << c.pp;
    v = static_cast<int>(stages / static_cast<size_t>(c.pp));
  }
  if (c.virtual_stages_per_rank) {
    v = *c.virtual_stages_per_rank;
    MT_CHECK(v >= 1) << "--num-virtual-stages-per-pipeline-rank " << v << " must be >= 1";
  } else if (c.layers_per_virtual_stage) {
    const int64_t per_stage = *c.layers_per_virtual_stage;
    MT_CHECK(!c.first_stage_layers && !c.last_stage_layers)
        << "with --decoder-first/last-pipeline-num-layers give the interleaving as "
           "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage";
    MT_CHECK(per_stage >= 1) << "--num-layers-per-virtual-pipeline-stage " << per_stage << " must be >= 1";
    check_even_split(c, 1, "");
    const int64_t per_rank = places_of(c) / c.pp;
    MT_CHECK(per_rank % per_stage == 0)
        << describe_places(c) << " over --pipeline-model-parallel-size " << c.pp << " gives " << per_rank
        << " per rank, which is not divisible by --num-layers-per-virtual-pipeline-stage " << per_stage
        << "; try a divisor of " << per_rank << ", or " << suggest_num_layers(c, c.pp * per_stage);
    v = static_cast<int>(per_rank / per_stage);
  }
  // Megatron's interleaved schedule needs a pipeline (arguments.py); we also allow pp = 2, which
  // Megatron only allows with --overlap-p2p-comm: our exchanges name each tensor's direction.
  MT_CHECK(v == 1 || c.pp >= 2) << "virtual pipeline stages (" << v
                                << " per rank) need --pipeline-model-parallel-size >= 2";
  return v;
}

PipelinePartition partition_layers(const PartitionConfig& c) {
  const int v = virtual_pipeline_size(c);
  if (c.layout) return partition_from_layout(c, v);
  std::vector<int64_t> per_rank;
  if (c.first_stage_layers || c.last_stage_layers) {
    per_rank = uneven_rank_layers(c, v);
  } else {
    check_even_split(c, v, "--num-virtual-stages-per-pipeline-rank");
    per_rank.assign(c.pp, places_of(c) / c.pp);
  }
  PipelinePartition p;
  p.pp = c.pp;
  p.vp = v;
  p.stages.resize(static_cast<size_t>(c.pp) * v);
  const int last = c.pp * v - 1;
  int64_t next = 0;
  for (int s = 0; s <= last; ++s) {
    int64_t count = per_rank[s % c.pp] / v;
    // The embedding (loss) fills one place of the first (last) virtual stage; Megatron allows the
    // stage to be left with no layers then (transformer_block.py).
    if (s == 0 && c.account_for_embedding) --count;
    if (s == last && c.account_for_loss) --count;
    MT_CHECK(count >= 0) << "internal: virtual stage " << s << " gets " << count << " layers";
    p.stages[s] = {next, next + count, s == 0, s == last};
    next += count;
  }
  MT_CHECK(next == c.num_layers) << "internal: the partition covers " << next << " of --num-layers " << c.num_layers;
  return p;
}

}  // namespace mt
