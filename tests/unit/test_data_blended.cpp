// Blending against Megatron-LM's own output (tests/golden/data_blend.txt, written by
// tools/ref/blended_dataset_megatron_ref.py): weight normalisation, per-dataset sizes with the
// 0.005 surplus, helpers.cpp's greedy blending index, --data-path word lists, and whole
// train/valid/test builds over real .bin/.idx files (weighted, unweighted, per-split paths),
// sample by sample. Also: odd --data-path lists are errors, and the index cache is used.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/blended_dataset.h"
#include "data/gpt_data_builder.h"
#include "testing.h"
#include "text_fixture.h"

namespace mt {
namespace {

using test::Record;

std::string golden(const std::string& name) { return std::string(MT_SOURCE_DIR) + "/tests/golden/" + name; }

std::vector<double> doubles(const Record& r, size_t from = 0) {
  std::vector<double> out;
  for (size_t i = from; i < r.fields.size(); ++i) out.push_back(std::stod(r.fields[i]));
  return out;
}

std::vector<int64_t> ints(const Record& r, size_t from = 0) {
  std::vector<int64_t> out;
  for (size_t i = from; i < r.fields.size(); ++i) out.push_back(std::stoll(r.fields[i]));
  return out;
}

TEST(DataBlend, WeightsSizesAndIndicesEqualMegatrons) {
  const std::vector<Record> records = test::load_text_fixture("data_blend.txt");
  int checked = 0;
  std::vector<double> raw, once;
  for (size_t k = 0; k < records.size(); ++k) {
    const Record& r = records[k];
    if (r.key == "normalize") raw = doubles(r);
    if (r.key == "normalized") {
      once = normalize_weights(raw);
      const std::vector<double> expected = doubles(r);
      ASSERT_EQ(once.size(), expected.size());
      for (size_t i = 0; i < once.size(); ++i) EXPECT_EQ(once[i], expected[i]) << "weight " << i;  // bit-exact
      ++checked;
    }
    if (r.key == "normalized_twice") {
      EXPECT_EQ(normalize_weights(once), doubles(r));
      ++checked;
    }
    if (r.key == "sizes" && k > 0 && records[k - 1].key == "normalized_twice") {
      const std::vector<int64_t> e = ints(r);
      EXPECT_EQ(blend_dataset_sizes(once, e[0], 0.005), std::vector<int64_t>(e.begin() + 1, e.end()));
      ++checked;
    }
    if (r.key == "blending") {
      const int64_t size = r.i(0);
      std::vector<int16_t> di;
      std::vector<int64_t> dsi;
      build_blending_indices(doubles(r, 1), size, di, dsi);
      EXPECT_EQ(std::vector<int64_t>(di.begin(), di.end()), ints(records[k + 1]));
      EXPECT_EQ(dsi, ints(records[k + 2]));
      ++checked;
    }
    if (r.key == "blend_list") {
      std::vector<std::vector<std::string>> parts(3);
      size_t p = 0;
      for (const std::string& f : r.fields) {
        if (f == "|") ++p;
        else parts[p].push_back(f);
      }
      const Blend b = parse_blend(parts[0], "--data-path");
      EXPECT_EQ(b.prefixes, parts[1]);
      if (parts[2] == std::vector<std::string>{"none"}) {
        EXPECT_FALSE(b.weights.has_value());
      } else {
        ASSERT_TRUE(b.weights.has_value());
        std::vector<double> w;
        for (const std::string& f : parts[2]) w.push_back(std::stod(f));
        EXPECT_EQ(*b.weights, w);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * 3 + 4 + 5);
}

Blend blend_of(const std::vector<std::string>& words) {
  std::vector<std::string> resolved;
  for (const std::string& w : words) resolved.push_back(w.rfind("data_blend_", 0) == 0 ? golden(w) : w);
  return parse_blend(resolved, "--data-path");
}

TEST(DataBlend, WholeBuildsEqualMegatrons) {
  const std::vector<Record> records = test::load_text_fixture("data_blend.txt");
  test::TempDir cache;
  int cases = 0;
  for (size_t k = 0; k < records.size(); ++k) {
    if (records[k].key != "case") continue;
    // case NAME BLEND... | PER-SPLIT (/-separated) | SPLIT | SEQ SEED
    std::vector<std::vector<std::string>> parts(4);
    size_t p = 0;
    for (size_t f = 1; f < records[k].fields.size(); ++f) {
      if (records[k].fields[f] == "|") ++p;
      else parts[p].push_back(records[k].fields[f]);
    }
    GptDataConfig config;
    if (parts[0] != std::vector<std::string>{"-"}) config.blend = blend_of(parts[0]);
    if (parts[1] != std::vector<std::string>{"-"}) {
      std::vector<std::string> words;
      int s = 0;
      for (size_t i = 0; i <= parts[1].size(); ++i) {
        if (i == parts[1].size() || parts[1][i] == "/") {
          config.blend_per_split[s++] = blend_of(words);
          words.clear();
        } else {
          words.push_back(parts[1][i]);
        }
      }
    }
    if (parts[2] != std::vector<std::string>{"-"}) config.split = parts[2][0];
    config.gpt.sequence_length = std::stoll(parts[3][0]);
    config.gpt.random_seed = static_cast<uint32_t>(std::stoll(parts[3][1]));
    config.gpt.eod_token = 499;
    config.cache_path = cache.path();
    const std::vector<int64_t> sizes = ints(records[k + 1]);
    for (int round = 0; round < 2; ++round) {  // the second round reads the index cache
      GptDataBuildStats stats;
      const auto datasets = build_gpt_datasets(config, {sizes[0], sizes[1], sizes[2]}, &stats);
      if (round == 0) EXPECT_GT(stats.indices_built, 0);
      else EXPECT_EQ(stats.indices_built, 0) << "the second build should load every index from the cache";
      for (size_t j = k + 2; j < records.size() && records[j].key != "case"; ++j) {
        const Record& r = records[j];
        if (r.key == "split") {
          ASSERT_TRUE(datasets[r.i(0)]) << "split " << r.i(0);
          EXPECT_EQ(datasets[r.i(0)]->size(), r.i(1)) << parts[0][0] << " split " << r.i(0);
          const auto* blended = dynamic_cast<const BlendedDataset*>(datasets[r.i(0)].get());
          if (j + 1 < records.size() && records[j + 1].key == "dataset_index") {
            ASSERT_NE(blended, nullptr) << "Megatron blends split " << r.i(0);
            EXPECT_EQ(std::vector<int64_t>(blended->dataset_index().begin(), blended->dataset_index().end()),
                      ints(records[j + 1]));
            EXPECT_EQ(blended->dataset_sample_index(), ints(records[j + 2]));
          } else {
            EXPECT_EQ(blended, nullptr) << "Megatron does not blend split " << r.i(0);
          }
        }
        if (r.key == "sample") {
          EXPECT_EQ(datasets[r.i(0)]->get_sample(r.i(1)).tokens, ints(r, 2)) << "sample " << r.i(1);
        }
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

TEST(DataBlend, OddDataPathListsAreErrors) {
  EXPECT_THROW(parse_blend({}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"0.3", "a", "0.7"}, "--data-path"), Error);       // unpaired weight
  EXPECT_THROW(parse_blend({"0.3", "a", "b", "0.7"}, "--data-path"), Error);  // swapped pair
  EXPECT_THROW(parse_blend({"0.3", "a", "0.7", "0.2"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"a", "0.5", "b"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"-1", "a", "2", "b"}, "--data-path"), Error);
  EXPECT_THROW(parse_blend({"0", "a", "0", "b"}, "--data-path"), Error);
  EXPECT_NO_THROW(parse_blend({"a", "b", "c"}, "--data-path"));
}

struct FixedSize : GptSampleDataset {
  int64_t n;
  explicit FixedSize(int64_t n_) : n(n_) {}
  int64_t size() const override { return n; }
  GptSample get_sample(int64_t) const override { return {}; }
  int64_t sequence_length() const override { return 8; }
};

TEST(DataBlend, OversampledBlendIsAnError) {
  const auto make = [](int64_t a, int64_t b) {
    return std::vector<std::shared_ptr<const GptSampleDataset>>{std::make_shared<FixedSize>(a),
                                                                 std::make_shared<FixedSize>(b)};
  };
  EXPECT_NO_THROW(BlendedDataset(make(5, 5), {0.5, 0.5}, 10, Split::train));
  EXPECT_THROW(BlendedDataset(make(5, 4), {0.5, 0.5}, 10, Split::train), Error);
}

TEST(DataBlend, DataPathExcludesPerSplitPaths) {
  GptDataConfig config;
  config.blend = blend_of({"0.5", "data_blend_a", "0.5", "data_blend_b"});
  config.split = "1";
  config.gpt.sequence_length = 16;
  config.use_cache = false;
  EXPECT_NO_THROW(build_gpt_datasets(config, {100, 0, 0}));
  config.blend_per_split[1] = blend_of({"data_blend_a"});
  EXPECT_THROW(build_gpt_datasets(config, {100, 10, 0}), Error);
  config.blend.reset();
  config.blend_per_split[1].reset();
  EXPECT_THROW(build_gpt_datasets(config, {100, 10, 0}), Error);  // no data at all
}

}  // namespace
}  // namespace mt
