// pipeline/partition: hand-computed layer ranges (even, uneven first/last, embedding and loss
// counted as layers, virtual stages), a sweep over many layouts against an independent
// re-derivation of Megatron's get_num_layers_to_build / get_transformer_layer_offset (every
// accepted layout tiles [0, num_layers) exactly), and the error messages with their suggestions.
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "pipeline/layout_string.h"
#include "pipeline/partition.h"
#include "testing.h"

namespace mt {
namespace {

using test::expect_error_mentioning;

PartitionConfig even(int pp, int64_t layers) {
  PartitionConfig c;
  c.pp = pp;
  c.num_layers = layers;
  return c;
}

// The ranges of every virtual stage as {first, last} pairs, in virtual-stage order.
std::vector<std::pair<int64_t, int64_t>> ranges(const PipelinePartition& p) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ChunkLayers& s : p.stages) out.emplace_back(s.first_layer, s.last_layer);
  return out;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// Every accepted layout: contiguous ranges in virtual-stage order tiling [0, num_layers), the
// embedding on virtual stage 0 only and the head on the last only.
void expect_tiles(const PipelinePartition& p, int64_t num_layers) {
  ASSERT_EQ(p.stages.size(), static_cast<size_t>(p.pp * p.vp));
  int64_t next = 0;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    EXPECT_EQ(p.stages[s].first_layer, next) << "virtual stage " << s;
    EXPECT_GE(p.stages[s].num_layers(), 0) << "virtual stage " << s;
    EXPECT_EQ(p.stages[s].embedding, s == 0);
    EXPECT_EQ(p.stages[s].head, s + 1 == p.stages.size());
    next = p.stages[s].last_layer;
  }
  EXPECT_EQ(next, num_layers);
}

TEST(PipelinePartition, EvenSplit) {
  const PipelinePartition p = partition_layers(even(4, 8));
  EXPECT_EQ(p.vp, 1);
  EXPECT_EQ(ranges(p), (Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_TRUE(p.chunk(0, 0).embedding);
  EXPECT_FALSE(p.chunk(0, 0).head);
  EXPECT_TRUE(p.chunk(3, 0).head);
  const PipelinePartition one = partition_layers(even(1, 5));
  EXPECT_EQ(one.stages, (std::vector<ChunkLayers>{{0, 5, true, true}}));
}

TEST(PipelinePartition, UnevenFirstAndLast) {
  PartitionConfig c = even(4, 10);
  c.first_stage_layers = 1;
  c.last_stage_layers = 3;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 1}, {1, 4}, {4, 7}, {7, 10}}));
  // Only the first given: the last rank is a middle rank.
  c = even(3, 8);
  c.first_stage_layers = 2;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 2}, {2, 5}, {5, 8}}));
  // Only the last given.
  c = even(3, 7);
  c.last_stage_layers = 1;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 3}, {3, 6}, {6, 7}}));
  // pp = 2: no middle rank; first + last is the whole model.
  c = even(2, 8);
  c.first_stage_layers = 3;
  c.last_stage_layers = 5;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 3}, {3, 8}}));
  // pp = 2 with only the first: the last rank takes the rest.
  c.last_stage_layers.reset();
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 3}, {3, 8}}));
}

TEST(PipelinePartition, EmbeddingAndLossCountAsLayers) {
  // 7 layers + the embedding = 8 places over 4 ranks: the first stage builds one layer fewer.
  PartitionConfig c = even(4, 7);
  c.account_for_embedding = true;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 1}, {1, 3}, {3, 5}, {5, 7}}));
  c = even(4, 6);
  c.account_for_embedding = true;
  c.account_for_loss = true;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 1}, {1, 3}, {3, 5}, {5, 6}}));
  c = even(4, 7);
  c.account_for_loss = true;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 7}}));
  // One place per stage: the embedding and the loss get stages of their own with no layers,
  // which Megatron allows (get_num_layers_to_build asserts only >= 0).
  c = even(4, 2);
  c.account_for_embedding = true;
  c.account_for_loss = true;
  const PipelinePartition p = partition_layers(c);
  EXPECT_EQ(ranges(p), (Ranges{{0, 0}, {0, 1}, {1, 2}, {2, 2}}));
  EXPECT_TRUE(p.stages[0].embedding);
  EXPECT_TRUE(p.stages[3].head);
  // pp = 1: the flags change nothing.
  c = even(1, 5);
  c.account_for_embedding = true;
  c.account_for_loss = true;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 5}}));
}

TEST(PipelinePartition, VirtualStages) {
  // Megatron's own examples (transformer_block.py): 8 layers, 2 ranks.
  PartitionConfig c = even(2, 8);
  c.virtual_stages_per_rank = 4;
  PipelinePartition p = partition_layers(c);
  EXPECT_EQ(p.vp, 4);
  for (int chunk = 0; chunk < 4; ++chunk) {
    EXPECT_EQ(p.chunk(0, chunk).first_layer, 2 * chunk);
    EXPECT_EQ(p.chunk(1, chunk).first_layer, 2 * chunk + 1);
    EXPECT_EQ(p.chunk(1, chunk).num_layers(), 1);
  }
  c.virtual_stages_per_rank = 2;
  p = partition_layers(c);
  EXPECT_EQ(p.chunk(0, 0), (ChunkLayers{0, 2, true, false}));
  EXPECT_EQ(p.chunk(1, 0), (ChunkLayers{2, 4, false, false}));
  EXPECT_EQ(p.chunk(0, 1), (ChunkLayers{4, 6, false, false}));
  EXPECT_EQ(p.chunk(1, 1), (ChunkLayers{6, 8, false, true}));
  // The same through --num-layers-per-virtual-pipeline-stage 2.
  c.virtual_stages_per_rank.reset();
  c.layers_per_virtual_stage = 2;
  EXPECT_EQ(virtual_pipeline_size(c), 2);
  EXPECT_EQ(partition_layers(c).stages, p.stages);
  // A layer per virtual stage of 4 places per rank: v = 4.
  c.layers_per_virtual_stage = 1;
  EXPECT_EQ(virtual_pipeline_size(c), 4);
  // v = 1 from the flag is no interleaving.
  c.layers_per_virtual_stage = 4;
  EXPECT_EQ(virtual_pipeline_size(c), 1);
}

TEST(PipelinePartition, VirtualStagesWithUnevenAndEmbedding) {
  // 16 layers, pp 4, v 2, first and last ranks 2 layers: middle ranks 6 (3 per chunk).
  PartitionConfig c = even(4, 16);
  c.first_stage_layers = 2;
  c.last_stage_layers = 2;
  c.virtual_stages_per_rank = 2;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 1}, {1, 4}, {4, 7}, {7, 8}, {8, 9}, {9, 12}, {12, 15}, {15, 16}}));
  // 7 layers + embedding over pp 2, v 2: 2 places per virtual stage.
  c = even(2, 7);
  c.account_for_embedding = true;
  c.virtual_stages_per_rank = 2;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 1}, {1, 3}, {3, 5}, {5, 7}}));
  // --num-layers-per-virtual-pipeline-stage counts the embedding's and loss's places: 6 + 2 = 8
  // places, 4 per rank, 2 per virtual stage.
  c = even(2, 6);
  c.account_for_embedding = true;
  c.account_for_loss = true;
  c.layers_per_virtual_stage = 2;
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 1}, {1, 3}, {3, 5}, {5, 6}}));
}

// Megatron's layout re-derived independently (offset and count of each virtual stage, following
// transformer_layer.py's get_transformer_layer_offset and transformer_block.py's
// get_num_layers_to_build), with the checks of transformer_config.py and arguments.py. nullopt:
// Megatron refuses the layout, or accepts one that would build a negative number of layers.
std::optional<std::vector<std::pair<int64_t, int64_t>>> megatron_layout(const PartitionConfig& c, int v) {
  const int pp = c.pp;
  const bool uneven = c.first_stage_layers || c.last_stage_layers;
  const int64_t n = c.num_layers;
  const int e = c.account_for_embedding, l = c.account_for_loss;
  std::vector<int64_t> per_rank(pp);
  if (uneven) {
    if (e || l) return std::nullopt;
    const int64_t f = c.first_stage_layers.value_or(0), t = c.last_stage_layers.value_or(0);
    for (const auto& x : {c.first_stage_layers, c.last_stage_layers})
      if (x && (*x <= 0 || *x % v != 0)) return std::nullopt;
    const int64_t middle = n - f - t;
    const int middle_ranks = pp - (c.first_stage_layers ? 1 : 0) - (c.last_stage_layers ? 1 : 0);
    if ((middle != 0) != (middle_ranks != 0) || middle < 0) return std::nullopt;
    if (middle_ranks > 0 && (middle % middle_ranks != 0 || (middle / middle_ranks) % v != 0)) return std::nullopt;
    for (int r = 0; r < pp; ++r) per_rank[r] = middle_ranks > 0 ? middle / middle_ranks : 0;
    if (c.first_stage_layers) per_rank[0] = f;
    if (c.last_stage_layers) per_rank[pp - 1] = t;
  } else {
    if ((n + e + l) % pp != 0 || ((n + e + l) / pp) % v != 0) return std::nullopt;
  }
  std::vector<std::pair<int64_t, int64_t>> layout(pp * v);
  for (int chunk = 0; chunk < v; ++chunk)
    for (int r = 0; r < pp; ++r) {
      int64_t offset = 0, count = 0;
      const bool first_vs = r == 0 && chunk == 0, last_vs = r == pp - 1 && chunk == v - 1;
      if (uneven) {
        count = per_rank[r] / v;
        const int64_t f = c.first_stage_layers.value_or(0), t = c.last_stage_layers.value_or(0);
        const int middle_ranks = pp - (c.first_stage_layers ? 1 : 0) - (c.last_stage_layers ? 1 : 0);
        const int64_t middle = n - f - t;
        const int middle_rank = c.first_stage_layers ? r - 1 : r;
        if (v > 1) {
          const int64_t per_chunk_total = f / v + middle / v + t / v;
          // Megatron divides by middle_ranks here even when it is 0 (pp 2 with both ends given),
          // a ZeroDivisionError; the term is 0 then.
          const int64_t per_middle_chunk = middle_ranks > 0 ? (middle / v) / middle_ranks : 0;
          offset = chunk * per_chunk_total + (r == 0 ? 0 : f / v + middle_rank * per_middle_chunk);
        } else {
          offset = r == 0 ? 0 : middle_rank * (middle_ranks > 0 ? middle / middle_ranks : 0) + f;
        }
      } else {
        const int64_t places = n + e + l, per = places / pp;
        count = per / v - (first_vs && e) - (last_vs && l);
        offset = (v > 1 ? chunk * (places / v) + r * (per / v) : r * per) - (e && !first_vs);
      }
      if (count < 0) return std::nullopt;
      layout[chunk * pp + r] = {offset, offset + count};
    }
  return layout;
}

// Many layouts: ours accepts exactly the ones Megatron accepts with a sane result, builds the same
// ranges, and every accepted one tiles [0, num_layers).
// --pipeline-model-parallel-layout, read as Megatron's parse_str_to_list unrolls it.
TEST(PipelineLayout, ParsesMegatronsLayoutStrings) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parse_pipeline_layout("Et*3|(tt|)*2L"), (V{"Ettt", "tt", "tt", "L"}));
  EXPECT_EQ(parse_pipeline_layout("Et*2|(tt|)*5t|tmL"), (V{"Ett", "tt", "tt", "tt", "tt", "tt", "t", "tmL"}));
  EXPECT_EQ(parse_pipeline_layout("Ettt|(tt|)*2,m|L"), (V{"Ettt", "tt", "tt", "m", "L"}));
  EXPECT_EQ(parse_pipeline_layout("E|t*2|L"), (V{"E", "tt", "L"}));
  for (const char* bad : {"Ex|L", "(tt|*2", "Et*|L", "E((t)*2)*2L", "*3tL", "(tt)L"})
    expect_error_mentioning([&] { parse_pipeline_layout(bad); }, "--pipeline-model-parallel-layout");
}

TEST(PipelineLayout, PartitionsAsSpelledOut) {
  PartitionConfig c = even(2, 15);
  c.layout = "Et*3|(tt|)*6L";  // 8 virtual stages: v = 4
  const PipelinePartition p = partition_layers(c);
  EXPECT_EQ(p.vp, 4);
  EXPECT_EQ(ranges(p), (Ranges{{0, 3}, {3, 5}, {5, 7}, {7, 9}, {9, 11}, {11, 13}, {13, 15}, {15, 15}}));
  expect_tiles(p, 15);
  c.layout = "Et*3|t*12L";
  EXPECT_EQ(ranges(partition_layers(c)), (Ranges{{0, 3}, {3, 15}}));
  EXPECT_EQ(partition_layers(c).vp, 1);
  // What Megatron refuses, refused with the reason.
  c.layout = "Et*3|t*11L";
  expect_error_mentioning([&] { partition_layers(c); }, "places 14 transformer layers (t) but --num-layers is 15");
  c.layout = "Et*3|t*6|t*6L";
  expect_error_mentioning([&] { partition_layers(c); }, "3 stages, not a multiple of --pipeline-model-parallel-size 2");
  c.layout = "t*3|Et*12L";
  expect_error_mentioning([&] { partition_layers(c); }, "the embedding (E) must come first, once");
  c.layout = "Et*3L|t*12";
  expect_error_mentioning([&] { partition_layers(c); }, "the loss (L) must come last, once");
  c.layout = "Et*3|t*12mL";
  expect_error_mentioning([&] { partition_layers(c); }, "multi-token prediction layers (m)");
  c.layout = "Et*3|t*12L";
  c.virtual_stages_per_rank = 2;
  expect_error_mentioning([&] { partition_layers(c); }, "places every layer itself");
}

TEST(PipelinePartition, MatchesMegatronOverManyLayouts) {
  int accepted = 0, refused = 0;
  for (int pp = 2; pp <= 8; ++pp)
    for (int64_t n = 1; n <= 36; ++n)
      for (int v = 1; v <= 4; ++v)
        for (int flags = 0; flags < 4; ++flags)
          for (int64_t f = 0; f <= 6; ++f)
            for (int64_t t = 0; t <= 6; ++t) {
              if (flags != 0 && (f != 0 || t != 0)) continue;  // account-for and uneven don't mix
              PartitionConfig c = even(pp, n);
              c.account_for_embedding = flags & 1;
              c.account_for_loss = flags & 2;
              if (f > 0) c.first_stage_layers = f;
              if (t > 0) c.last_stage_layers = t;
              if (v > 1) c.virtual_stages_per_rank = v;
              const auto expected = megatron_layout(c, v);
              try {
                const PipelinePartition p = partition_layers(c);
                ++accepted;
                ASSERT_TRUE(expected) << "pp " << pp << " n " << n << " v " << v << " flags " << flags << " f " << f
                                      << " t " << t << ": Megatron refuses what we accept";
                EXPECT_EQ(ranges(p), *expected) << "pp " << pp << " n " << n << " v " << v << " f " << f << " t " << t;
                expect_tiles(p, n);
                for (size_t s = 0; s < p.stages.size(); ++s)  // empty only where the embedding / loss sits
                  if (p.stages[s].num_layers() == 0) {
                    EXPECT_TRUE((s == 0 && c.account_for_embedding) ||
                                (s + 1 == p.stages.size() && c.account_for_loss));
                  }
              } catch (const Error& err) {
                ++refused;
                // Megatron accepts it only if its layout would lose or repeat layers.
                if (expected) {
                  int64_t next = 0;
                  bool tiles = true;
                  for (const auto& [first, last] : *expected) {
                    tiles = tiles && first == next;
                    next = last;
                  }
                  EXPECT_FALSE(tiles && next == n) << "we refuse a layout Megatron builds correctly: " << err.what();
                }
              }
            }
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(PipelinePartition, EvenSplitErrorsNameTheNumbersAndAFix) {
  // The suggestions: a divisible --num-layers, or an uneven split that works.
  expect_error_mentioning([] { partition_layers(even(4, 10)); },
                          "--num-layers 10 is not divisible by --pipeline-model-parallel-size 4");
  expect_error_mentioning([] { partition_layers(even(4, 10)); }, "try --num-layers 8 or 12");
  expect_error_mentioning([] { partition_layers(even(4, 10)); },
                          "--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 2");
  PartitionConfig fixed = even(4, 10);
  fixed.first_stage_layers = 2;
  fixed.last_stage_layers = 2;
  expect_tiles(partition_layers(fixed), 10);
  // Too few layers for any uneven split: only the layer counts are offered.
  expect_error_mentioning([] { partition_layers(even(4, 3)); }, "try --num-layers 4");
  // The embedding's place is named in the count.
  PartitionConfig c = even(4, 10);
  c.account_for_embedding = true;
  expect_error_mentioning([&] { partition_layers(c); },
                          "--num-layers 10 + 1 (--account-for-embedding-in-pipeline-split) = 11 places is not "
                          "divisible by --pipeline-model-parallel-size 4");
  expect_error_mentioning([&] { partition_layers(c); }, "try --num-layers 7 or 11");
  // Per rank not divisible by the chunks.
  c = even(2, 8);
  c.virtual_stages_per_rank = 3;
  expect_error_mentioning([&] { partition_layers(c); },
                          "gives 4 per rank, which is not divisible by --num-virtual-stages-per-pipeline-rank 3");
  expect_error_mentioning([&] { partition_layers(c); }, "try --num-layers 6 or 12");
  c.virtual_stages_per_rank.reset();
  c.layers_per_virtual_stage = 3;
  expect_error_mentioning([&] { partition_layers(c); },
                          "4 per rank, which is not divisible by --num-layers-per-virtual-pipeline-stage 3");
}

TEST(PipelinePartition, FlagErrors) {
  PartitionConfig c = even(4, 10);
  c.first_stage_layers = 1;
  c.last_stage_layers = 2;
  expect_error_mentioning([&] { partition_layers(c); }, "= 7 layers do not split evenly");
  expect_error_mentioning([&] { partition_layers(c); }, "try --decoder-first-pipeline-num-layers 2");
  c.first_stage_layers = 0;
  expect_error_mentioning([&] { partition_layers(c); }, "--decoder-first-pipeline-num-layers 0 must be > 0");
  c = even(2, 8);
  c.first_stage_layers = 3;
  c.last_stage_layers = 3;
  expect_error_mentioning([&] { partition_layers(c); }, "= 2 layers are left over");
  c = even(4, 16);
  c.first_stage_layers = 3;
  c.last_stage_layers = 3;
  c.virtual_stages_per_rank = 2;
  expect_error_mentioning([&] { partition_layers(c); },
                          "--decoder-first-pipeline-num-layers 3 is not divisible by the 2 virtual stages");
  c.first_stage_layers = 2;
  c.last_stage_layers = 4;  // middle 10 over 2 ranks: 5 per rank, not divisible by 2 chunks
  expect_error_mentioning([&] { partition_layers(c); }, "give 5 per middle pipeline rank");
  c.virtual_stages_per_rank.reset();
  c.layers_per_virtual_stage = 1;
  expect_error_mentioning([&] { partition_layers(c); },
                          "give the interleaving as --num-virtual-stages-per-pipeline-rank");
  c = even(4, 10);
  c.first_stage_layers = 1;
  c.account_for_loss = true;
  expect_error_mentioning([&] { partition_layers(c); }, "cannot be combined with --account-for-embedding");
  c = even(2, 8);
  c.layers_per_virtual_stage = 2;
  c.virtual_stages_per_rank = 2;
  expect_error_mentioning([&] { partition_layers(c); }, "at most one of --num-layers-per-virtual-pipeline-stage");
  c = even(1, 8);
  c.virtual_stages_per_rank = 2;
  expect_error_mentioning([&] { partition_layers(c); }, "need --pipeline-model-parallel-size >= 2");
  // One rank: an uneven count must be the whole model (Megatron would build only it and drop
  // the rest).
  c = even(1, 8);
  c.first_stage_layers = 8;
  expect_tiles(partition_layers(c), 8);
  c.last_stage_layers = 3;
  expect_error_mentioning([&] { partition_layers(c); }, "the only stage holds all --num-layers 8, not 3");
  expect_error_mentioning([] { partition_layers(even(2, 0)); }, "--num-layers 0 must be >= 1");
}

}  // namespace
}  // namespace mt
