// data/gpt_dataset and data/mock_dataset: split strings, the document / sample / shuffle indices
// and samples (tokens, labels, loss mask, position ids) against a Python port of Megatron's
// algorithm driven by real numpy (tools/ref/gpt_dataset_ref.py -> tests/golden/data_gpt_dataset.txt):
// small synthetic datasets (multi-epoch, separate final epoch, partial validation sample, no extra
// token) and Megatron's --mock-data with seed 1234, seq 64, NullTokenizer vocab 1000.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/gpt_dataset.h"
#include "data/mock_dataset.h"
#include "text_fixture.h"

namespace mt {
namespace {

using test::Record;

const std::vector<Record>& fixture() {
  static const std::vector<Record> all = test::load_text_fixture("data_gpt_dataset.txt");
  return all;
}

template <typename T>
uint64_t hash_values(const std::vector<T>& values) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (T v : values) h = h * 1000003ull + static_cast<uint64_t>(static_cast<int64_t>(v));
  return h;
}

// Synthetic sequences, the same as the fixture script's: token j of sequence i is
// 1 + (131 i + 7 j) mod 50, and the last token is EOD (0).
constexpr int64_t k_synth_eod = 0;
class SyntheticDataset : public LowLevelDataset {
 public:
  explicit SyntheticDataset(std::vector<int32_t> lengths) : lengths_(std::move(lengths)) {}
  std::span<const int32_t> sequence_lengths() const override { return lengths_; }
  void read_tokens(int64_t seq, int64_t offset, int64_t length, std::vector<int64_t>& out) const override {
    EXPECT_LE(offset + length, lengths_[seq]) << "read past the end of sequence " << seq;
    for (int64_t j = offset; j < offset + length; ++j)
      out.push_back(j == lengths_[seq] - 1 ? k_synth_eod : 1 + (seq * 131 + j * 7) % 50);
  }

 private:
  std::vector<int32_t> lengths_;
};

template <typename T>
void expect_array(const std::vector<T>& got, const Record& r, const std::string& what) {
  ASSERT_EQ(got.size(), r.fields.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(static_cast<int64_t>(got[k]), r.i(k)) << what << " [" << k << "]";
}

template <typename T>
void expect_hashed(const std::vector<T>& got, const Record& r, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), r.i(0)) << what;
  EXPECT_EQ(hash_values(got), r.u(1)) << what;
  for (size_t k = 0; k < 8 && k < got.size(); ++k) EXPECT_EQ(static_cast<int64_t>(got[k]), r.i(2 + k)) << what << k;
}

// Checks a built dataset against the records that follow fixture()[at] ("case <name>") until the
// next case; returns how many samples were compared.
int check_case(const GptDataset& ds, size_t at) {
  const auto& all = fixture();
  const std::string name = all[at].fields.at(0);
  int samples = 0;
  GptSample s;
  auto ends_case = [](const std::string& key) {
    return key == "case" || key == "setup" || key == "mock" || key == "split" || key == "lengths";
  };
  for (size_t k = at + 1; k < all.size() && !ends_case(all[k].key); ++k) {
    const Record& r = all[k];
    const std::string what = name + " " + r.key;
    if (r.key == "num_epochs") EXPECT_EQ(ds.num_epochs(), r.i(0)) << what;
    else if (r.key == "separate") EXPECT_EQ(ds.separate_final_epoch(), r.i(0) != 0) << what;
    else if (r.key == "size") EXPECT_EQ(ds.size(), r.i(0)) << what;
    else if (r.key == "document_index") expect_array(ds.document_index(), r, what);
    else if (r.key == "sample_index") expect_array(ds.sample_index(), r, what);
    else if (r.key == "shuffle_index") expect_array(ds.shuffle_index(), r, what);
    else if (r.key == "document_index_hash") expect_hashed(ds.document_index(), r, what);
    else if (r.key == "sample_index_hash") expect_hashed(ds.sample_index(), r, what);
    else if (r.key == "shuffle_index_hash") expect_hashed(ds.shuffle_index(), r, what);
    else {
      // Per-sample records: "<field> <i> values..."
      const int64_t i = r.i(0);
      const Record values{r.key, {r.fields.begin() + 1, r.fields.end()}};
      if (r.key == "tokens") {
        s = ds.get_sample(i);
        ++samples;
        expect_array(s.tokens, values, what + " " + std::to_string(i));
      } else if (r.key == "last_label") {
        // The fixture stores only the last label; the others are the next inputs.
        EXPECT_EQ(s.labels.size(), s.tokens.size());
        for (size_t t = 0; t + 1 < std::min(s.labels.size(), s.tokens.size()); ++t) EXPECT_EQ(s.labels[t], s.tokens[t + 1]) << what << " " << t;
        EXPECT_EQ(s.labels.back(), values.i(0)) << what << " " << i;
      } else if (r.key == "loss_mask") {
        expect_array(s.loss_mask, values, what + " " + std::to_string(i));
      } else if (r.key == "position_ids") {
        expect_array(s.position_ids, values, what + " " + std::to_string(i));
      } else {
        ADD_FAILURE() << "unknown fixture record " << r.key;
      }
    }
  }
  return samples;
}

TEST(GptDatasetSplit, ParseNormalizeAndRangesMatchMegatron) {
  int n_checked = 0;
  for (const Record& r : fixture()) {
    if (r.key != "split") continue;
    std::string split = r.fields.at(0);
    for (char& c : split)
      if (c == '_') c = ' ';
    const int64_t n = r.i(1);
    const auto vec = parse_and_normalize_split(split);
    for (int s = 0; s < 3; ++s)
      EXPECT_EQ(vec[s], std::strtod(r.fields.at(2 + s).c_str(), nullptr)) << split << " part " << s;
    const SplitMatrix m = split_matrix_from_vector(vec);
    for (int s = 0; s < 3; ++s) {
      const int64_t beg = r.i(5 + 2 * s), end = r.i(6 + 2 * s);
      if (beg == -1) {
        EXPECT_FALSE(m[s].has_value()) << split << " split " << s;
      } else {
        ASSERT_TRUE(m[s].has_value()) << split << " split " << s;
        EXPECT_EQ(split_sequence_range(*m[s], n), std::make_pair(beg, end)) << split << " split " << s;
      }
    }
    ++n_checked;
  }
  EXPECT_EQ(n_checked, 10);
}

TEST(GptDatasetSplit, BadStringsFailLoud) {
  EXPECT_THROW(parse_and_normalize_split("1.2.3,1"), Error);
  EXPECT_THROW(parse_and_normalize_split("1,2,3,4"), Error);
  EXPECT_THROW(parse_and_normalize_split("0,0,0"), Error);
  EXPECT_THROW(parse_and_normalize_split(""), Error);
}

TEST(GptDataset, SyntheticCasesMatchMegatron) {
  const auto& all = fixture();
  int n_cases = 0;
  std::vector<int32_t> lengths;
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k].key != "setup") continue;
    // setup <name> <split> <split index> <num_samples|-1> <seq> <seed> <drop_last_valid>
    //       <eod_mask_loss> <reset_position_ids> <extra>
    // A "lengths" record follows when the case uses new sequence lengths; else the last ones hold.
    const Record& setup = all[k];
    size_t next = k + 1;
    if (all.at(next).key == "lengths") {
      lengths.clear();
      for (size_t f = 0; f < all[next].fields.size(); ++f) lengths.push_back(static_cast<int32_t>(all[next].i(f)));
      ++next;
    }
    ASSERT_FALSE(lengths.empty());
    const auto ds_low = std::make_shared<SyntheticDataset>(lengths);
    const int split_index = static_cast<int>(setup.i(2));
    const auto matrix = split_matrix_from_vector(parse_and_normalize_split(setup.fields.at(1)));
    ASSERT_TRUE(matrix[split_index].has_value());
    const auto [beg, end] = split_sequence_range(*matrix[split_index], static_cast<int64_t>(lengths.size()));
    std::vector<int32_t> indices;
    for (int64_t d = beg; d < end; ++d) indices.push_back(static_cast<int32_t>(d));
    GptDatasetConfig cfg;
    cfg.sequence_length = setup.i(4);
    cfg.random_seed = static_cast<uint32_t>(setup.i(5));
    cfg.drop_last_partial_validation_sequence = setup.i(6) != 0;
    cfg.eod_mask_loss = setup.i(7) != 0;
    cfg.reset_position_ids = setup.i(8) != 0;
    cfg.add_extra_token = setup.i(9) != 0;
    cfg.eod_token = k_synth_eod;
    cfg.pad_token = -1;
    const std::optional<int64_t> num_samples = setup.i(3) < 0 ? std::nullopt : std::optional<int64_t>(setup.i(3));
    const GptDataset ds(ds_low, indices, num_samples, static_cast<Split>(split_index), cfg);
    ASSERT_EQ(all.at(next).key, "case");
    SCOPED_TRACE(setup.fields.at(0));
    EXPECT_GT(check_case(ds, next), 0);
    ++n_cases;
  }
  EXPECT_EQ(n_cases, 11);
}

TEST(GptDataset, MockDataMatchesMegatron) {
  // --mock-data --tokenizer-type NullTokenizer --vocab-size 1000 --seq-length 64 --seed 1234
  // --eod-mask-loss --reset-position-ids; train 10 iterations x GBS 8, valid/test 2 x 8 samples.
  GptDatasetConfig cfg;
  cfg.sequence_length = 64;
  cfg.random_seed = 1234;
  cfg.eod_mask_loss = true;
  cfg.reset_position_ids = true;
  const auto splits = build_mock_gpt_datasets(null_tokenizer_ids(1000), {80, 16, 16}, cfg);
  const auto& all = fixture();
  int n_splits = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    if (all[k].key != "mock") continue;
    const int s = static_cast<int>(all[k].i(0));
    ASSERT_TRUE(splits[s].has_value());
    EXPECT_EQ(splits[s]->config().eod_token, 999);
    ASSERT_EQ(all.at(k + 1).key, "case");
    SCOPED_TRACE(all[k + 1].fields.at(0));
    EXPECT_EQ(check_case(*splits[s], k + 1), 8);  // the first global batch, samples 0..7
    ++n_splits;
  }
  EXPECT_EQ(n_splits, 3);
}

TEST(GptDataset, MockContentIsCountingThenEod) {
  const MockGptLowLevelDataset mock(1000, 999);
  const auto lengths = mock.sequence_lengths();
  ASSERT_EQ(lengths.size(), 100000u);
  std::vector<int64_t> seq;
  mock.read_tokens(0, 0, lengths[0], seq);
  ASSERT_EQ(static_cast<int64_t>(seq.size()), lengths[0]);
  for (int64_t t = 0; t + 1 < lengths[0]; ++t) EXPECT_EQ(seq[t], (t + 1) % 1000);
  EXPECT_EQ(seq.back(), 999);
  EXPECT_EQ(null_tokenizer_ids_legacy(1000).eod, 1000);
  EXPECT_EQ(null_tokenizer_ids_legacy(1000).vocab_size, 1001);
}

TEST(GptDataset, SamplesArePureFunctionsOfIndexAndSeed) {
  GptDatasetConfig cfg;
  cfg.sequence_length = 16;
  cfg.random_seed = 7;
  cfg.eod_token = k_synth_eod;
  const auto low = std::make_shared<SyntheticDataset>(std::vector<int32_t>{5, 17, 3, 40, 1, 9, 26, 12, 30});
  const std::vector<int32_t> docs{0, 1, 2, 3, 4, 5, 6, 7, 8};
  const GptDataset a(low, docs, 50, Split::train, cfg);
  const GptDataset b(low, docs, 50, Split::train, cfg);
  EXPECT_EQ(a.shuffle_index(), b.shuffle_index());
  // Reading order does not matter: backwards on b equals forwards on a.
  std::vector<std::vector<int64_t>> forward, backward(a.size());
  for (int64_t i = 0; i < a.size(); ++i) forward.push_back(a.sample_text(i));
  for (int64_t i = b.size() - 1; i >= 0; --i) backward[i] = b.sample_text(i);
  EXPECT_EQ(forward, backward);
  // The seed matters.
  cfg.random_seed = 8;
  const GptDataset c(low, docs, 50, Split::train, cfg);
  EXPECT_NE(a.shuffle_index(), c.shuffle_index());
  // Consecutive samples (before the shuffle) overlap by exactly the one extra token: the last
  // label of one is the first input of the next.
  std::vector<int64_t> position(a.size());
  for (int64_t i = 0; i < a.size(); ++i) position[a.shuffle_index()[i]] = i;
  for (int64_t j = 0; j + 1 < a.size(); ++j)
    EXPECT_EQ(a.sample_text(position[j]).back(), a.sample_text(position[j + 1]).front()) << j;
}

TEST(GptDataset, RejectsEmptyInput) {
  const auto low = std::make_shared<SyntheticDataset>(std::vector<int32_t>{5, 17, 3});
  GptDatasetConfig cfg;
  cfg.sequence_length = 4;
  EXPECT_THROW(GptDataset(low, {}, 10, Split::train, cfg), Error);
  EXPECT_THROW(GptDataset(low, {0, 3}, 10, Split::train, cfg), Error);
  const GptDataset ok(low, {0, 1, 2}, 10, Split::train, cfg);
  EXPECT_THROW(ok.sample_text(ok.size()), Error);
  // "969,30,1" over 3 sequences leaves the test split an empty range: a clear error, not a hang.
  EXPECT_THROW(build_gpt_dataset_splits(low, "969,30,1", {10, 1, 1}, cfg), Error);
}

}  // namespace
}  // namespace mt
