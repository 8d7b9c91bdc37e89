// Owns the GPT dataset index machinery declared in gpt_dataset.h. Each function mirrors one
// Megatron function (named in its comment), including its integer/float quirks, because the
// indices must match Megatron's element for element.
#include "data/gpt_dataset.h"

#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>

#include "base/error.h"

namespace mt {

const char* split_name(Split s) {
  switch (s) {
    case Split::train: return "train";
    case Split::valid: return "valid";
    case Split::test: return "test";
  }
  return "?";
}

// --- Split strings ----------------------------------------------------------------------------

std::array<double, 3> parse_and_normalize_split(std::string_view split) {
  // re.findall(r"[.0-9]+", split), then float() of each match.
  std::vector<double> values;
  size_t i = 0;
  while (i < split.size()) {
    auto is_num = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
    if (!is_num(split[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < split.size() && is_num(split[j])) ++j;
    const std::string word(split.substr(i, j - i));
    char* end = nullptr;
    const double v = std::strtod(word.c_str(), &end);
    MT_CHECK(end == word.c_str() + word.size())
        << "--split \"" << split << "\": \"" << word << "\" is not a number; use e.g. --split 969,30,1";
    values.push_back(v);
    i = j;
  }
  MT_CHECK(values.size() <= 3) << "--split \"" << split
                               << "\" has more than three parts; give train,valid,test weights";
  std::array<double, 3> out{0.0, 0.0, 0.0};
  double sum = 0.0;
  for (size_t k = 0; k < values.size(); ++k) out[k] = values[k];
  for (double v : out) sum += v;  // numpy.sum of three values adds left to right
  MT_CHECK(sum > 0.0) << "--split \"" << split << "\" has no positive weight; use e.g. --split 969,30,1";
  for (double& v : out) v /= sum;
  return out;
}

SplitMatrix split_matrix_from_vector(const std::array<double, 3>& vector) {
  SplitMatrix m;
  double lo = 0.0;
  for (int s = 0; s < 3; ++s) {
    const double hi = lo + vector[s];  // Python float cumulative sum, same order
    if (hi > lo) m[s] = std::make_pair(lo, hi);
    lo = hi;
  }
  return m;
}

std::pair<int64_t, int64_t> split_sequence_range(std::pair<double, double> bookend, int64_t n) {
  // int(round(x)): Python rounds halves to even, as nearbyint does in the default rounding mode.
  const double nd = static_cast<double>(n);
  return {static_cast<int64_t>(std::nearbyint(bookend.first * nd)),
          static_cast<int64_t>(std::nearbyint(bookend.second * nd))};
}

// --- Index construction -----------------------------------------------------------------------

int64_t gpt_num_epochs(int64_t tokens_per_epoch, std::optional<int64_t> num_samples, int64_t sequence_length,
                       int64_t extra_token) {
  if (!num_samples) return 1;
  MT_CHECK(tokens_per_epoch > 0) << "the split has no tokens, so no samples can be drawn from it";
  const int64_t requested = *num_samples * sequence_length + extra_token;
  // ceil(requested / tokens_per_epoch), at least 1: the same E as Megatron's counting loop.
  return std::max<int64_t>(1, (requested + tokens_per_epoch - 1) / tokens_per_epoch);
}

std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    std::vector<int32_t> index;
    index.reserve(documents.size() * static_cast<size_t>(num_epochs));
    for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), documents.begin(), documents.end());
    rng.shuffle(std::span<int32_t>(index));
    return index;
  }
  // The final epoch is shuffled on its own so that a small last epoch is not spread over the run.
  std::vector<int32_t> first = build_document_index(documents, num_epochs - 1, rng, false);
  const std::vector<int32_t> last = build_document_index(documents, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int64_t sequence_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch, bool drop_last_partial_sequence,
                                        int64_t extra_token) {
  MT_CHECK(sequence_length > 1) << "--seq-length must be at least 2, got " << sequence_length;
  MT_CHECK(tokens_per_epoch > 1) << "the split holds " << tokens_per_epoch
                                 << " token(s); it needs at least 2 to form a sample";
  MT_CHECK(!document_index.empty()) << "empty document index";
  const int64_t total = num_epochs * tokens_per_epoch - extra_token;
  int64_t num_samples;
  if (drop_last_partial_sequence) {
    num_samples = total / sequence_length;
  } else {
    // helpers.cpp rounds up in single precision: ceil(float(total) / seq_length).
    num_samples = static_cast<int64_t>(std::ceil(static_cast<float>(total) / static_cast<float>(sequence_length)));
  }
  std::vector<int64_t> idx(static_cast<size_t>(2 * (num_samples + 1)));
  int64_t doc = 0;     // position in the document index
  int64_t offset = 0;  // token offset in that document
  idx[0] = 0;
  idx[1] = 0;
  const int64_t last_doc = static_cast<int64_t>(document_index.size()) - 1;
  for (int64_t row = 1; row <= num_samples; ++row) {
    int64_t remaining = sequence_length + extra_token;
    while (remaining != 0) {
      const int64_t doc_length = sequence_lengths[document_index[doc]] - offset;
      remaining -= doc_length;
      if (remaining <= 0) {
        // The sample ends inside this document; step back by the extra token so the next sample
        // starts on the token this one used only as its last label.
        offset += remaining + doc_length - extra_token;
        remaining = 0;
      } else {
        if (doc == last_doc) {
          // Out of documents: only the partial last sample of a non-drop-last split gets here.
          MT_CHECK(row == num_samples) << "sample index ran out of documents at sample " << row << " of "
                                       << num_samples;
          offset = sequence_lengths[document_index[doc]] - extra_token;
          break;
        }
        ++doc;
        offset = 0;
      }
    }
    idx[2 * row] = doc;
    idx[2 * row + 1] = offset;
  }
  return idx;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
  // Megatron stores uint32 (int64 past 2^32 - 2 entries); the element type does not change the
  // draws, so one int64 vector serves both.
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  std::iota(index.begin(), index.end(), int64_t{0});
  std::span<int64_t> all(index);
  rng.shuffle(all.subspan(0, static_cast<size_t>(num_samples)));
  if (num_samples != total_size) rng.shuffle(all.subspan(static_cast<size_t>(num_samples)));
  return index;
}

// --- GptDataset ---------------------------------------------------------------------------------

GptDatasetConfig GptDataset::normalized(GptDatasetConfig config) {
  // MegatronDataset: a pad id that collides with EOD would unmask/mask real tokens, so it falls
  // back to -1, an id no dataset contains.
  if (config.pad_token == config.eod_token && !config.allow_ambiguous_pad_tokens) config.pad_token = -1;
  return config;
}

GptDatasetIndices GptDataset::build_indices(const LowLevelDataset& dataset, std::span<const int32_t> indices,
                                            std::optional<int64_t> num_samples, Split split, GptDatasetConfig config) {
  config = normalized(config);
  MT_CHECK(config.sequence_length > 1) << "--seq-length must be at least 2, got " << config.sequence_length;
  MT_CHECK(!num_samples || *num_samples >= 0) << "negative sample count " << *num_samples;
  const std::span<const int32_t> lengths = dataset.sequence_lengths();
  for (int32_t id : indices)
    MT_CHECK(id >= 0 && id < static_cast<int64_t>(lengths.size()))
        << "sequence id " << id << " is outside the dataset's " << lengths.size() << " sequences";
  MT_CHECK(!indices.empty()) << "the " << split_name(split)
                             << " split selects no sequences; give it a larger --split weight or more data";

  GptDatasetIndices out;
  const int64_t extra = config.add_extra_token ? 1 : 0;
  const int64_t seq = config.sequence_length;
  for (int32_t id : indices) out.tokens_per_epoch += lengths[id];
  out.num_epochs = gpt_num_epochs(out.tokens_per_epoch, num_samples, seq, extra);

  // _build_document_sample_shuffle_indices: decide whether the last epoch is shuffled apart.
  int64_t samples_sans_final_epoch = 0;
  if (out.num_epochs > 1) {
    samples_sans_final_epoch = ((out.num_epochs - 1) * out.tokens_per_epoch - extra) / seq;
    const int64_t from_final_epoch = *num_samples - samples_sans_final_epoch;
    const int64_t per_epoch = (out.tokens_per_epoch - extra) / seq;
    MT_CHECK(from_final_epoch >= 0) << "internal: negative samples in the final epoch";
    MT_CHECK(from_final_epoch <= per_epoch + 1) << "internal: final epoch holds more than one epoch";
    // int(0.80 * per_epoch), computed in double as Python does.
    out.separate_final_epoch = from_final_epoch < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }

  // One RandomState, drawn first by the document index and then by the shuffle index.
  NumpyRandomState rng(config.random_seed);
  out.document_index = build_document_index(indices, out.num_epochs, rng, out.separate_final_epoch);
  const bool drop_last = split == Split::valid ? config.drop_last_partial_validation_sequence : true;
  out.sample_index =
      build_sample_index(lengths, out.document_index, seq, out.num_epochs, out.tokens_per_epoch, drop_last, extra);
  const int64_t total = static_cast<int64_t>(out.sample_index.size() / 2) - 1;
  out.shuffle_index = build_shuffle_index(out.separate_final_epoch ? samples_sans_final_epoch : total, total, rng);
  return out;
}

GptDataset::GptDataset(std::shared_ptr<const LowLevelDataset> dataset, std::vector<int32_t> indices,
                       std::optional<int64_t> num_samples, Split split, GptDatasetConfig config)
    : GptDataset(dataset, indices, num_samples, split, config, [&] {
        MT_CHECK(dataset != nullptr) << "GptDataset needs a low-level dataset";
        return build_indices(*dataset, indices, num_samples, split, config);
      }()) {}

GptDataset::GptDataset(std::shared_ptr<const LowLevelDataset> dataset, std::vector<int32_t> indices,
                       std::optional<int64_t> num_samples, Split split, GptDatasetConfig config,
                       GptDatasetIndices built)
    : dataset_(std::move(dataset)),
      indices_(std::move(indices)),
      num_samples_(num_samples),
      split_(split),
      config_(normalized(config)),
      tokens_per_epoch_(built.tokens_per_epoch),
      num_epochs_(built.num_epochs),
      separate_final_epoch_(built.separate_final_epoch),
      document_index_(std::move(built.document_index)),
      sample_index_(std::move(built.sample_index)),
      shuffle_index_(std::move(built.shuffle_index)) {
  MT_CHECK(dataset_ != nullptr) << "GptDataset needs a low-level dataset";
  // Every index must point inside the next one, so sample_text cannot read out of bounds.
  const int64_t n = dataset_->num_sequences();
  for (int32_t d : document_index_) MT_CHECK(d >= 0 && d < n) << "stale dataset indices: sequence " << d;
  MT_CHECK(sample_index_.size() >= 2 && sample_index_.size() % 2 == 0) << "stale dataset indices: sample index";
  const std::span<const int32_t> lengths = dataset_->sequence_lengths();
  for (size_t r = 0; r < sample_index_.size(); r += 2) {
    const int64_t d = sample_index_[r], o = sample_index_[r + 1];
    MT_CHECK(d >= 0 && d < static_cast<int64_t>(document_index_.size()) && o >= 0 &&
             o <= lengths[document_index_[d]])
        << "stale dataset indices: sample row " << r / 2;
  }
  const int64_t rows = static_cast<int64_t>(sample_index_.size() / 2) - 1;
  for (int64_t j : shuffle_index_) MT_CHECK(j >= 0 && j < rows) << "stale dataset indices: shuffle entry " << j;
}

std::vector<int64_t> GptDataset::sample_text(int64_t i) const {
  MT_CHECK(i >= 0 && i < size()) << "sample " << i << " is outside the " << split_name(split_) << " dataset's "
                                 << size() << " samples";
  const int64_t extra = config_.add_extra_token ? 1 : 0;
  const int64_t want = config_.sequence_length + extra;
  const std::span<const int32_t> lengths = dataset_->sequence_lengths();
  const int64_t j = shuffle_index_[static_cast<size_t>(i)];
  const int64_t d0 = sample_index_[2 * j], o0 = sample_index_[2 * j + 1];
  const int64_t d1 = sample_index_[2 * j + 2], o1 = sample_index_[2 * j + 3];
  std::vector<int64_t> text;
  text.reserve(static_cast<size_t>(want));
  // Megatron slices with Python semantics, so a range past the end of a sequence is clipped.
  auto read = [&](int64_t seq_id, int64_t offset, int64_t length) {
    const int64_t avail = std::max<int64_t>(0, lengths[seq_id] - offset);
    const int64_t n = std::min(length, avail);
    if (n > 0) dataset_->read_tokens(seq_id, offset, n, text);
  };
  if (d0 == d1) {
    read(document_index_[d0], o0, o1 - o0 + extra);
  } else {
    for (int64_t d = d0; d <= d1; ++d) {
      const int64_t seq_id = document_index_[d];
      const int64_t offset = d > d0 ? 0 : o0;
      const int64_t length = d < d1 ? lengths[seq_id] - offset : o1 + extra;
      read(seq_id, offset, length);
    }
  }
  MT_CHECK(static_cast<int64_t>(text.size()) <= want) << "internal: sample " << i << " has " << text.size()
                                                      << " tokens, more than " << want;
  text.resize(static_cast<size_t>(want), config_.pad_token);
  return text;
}

GptSample GptDataset::get_sample(int64_t i) const {
  const std::vector<int64_t> text = sample_text(i);
  const int64_t n = config_.sequence_length;
  const int64_t pad = config_.pad_token, eod = config_.eod_token;
  GptSample s;
  if (config_.add_extra_token) {
    s.tokens.assign(text.begin(), text.end() - 1);
    s.labels.assign(text.begin() + 1, text.end());
  } else {
    // Without the extra token the labels are the inputs rolled left, the last one padding.
    s.tokens = text;
    s.labels.assign(text.begin() + 1, text.end());
    s.labels.push_back(pad);
  }
  // _get_ltor_masks_and_position_ids on the raw tokens (before pad ids are replaced).
  s.loss_mask.assign(static_cast<size_t>(n), 1.0f);
  s.position_ids.resize(static_cast<size_t>(n));
  s.document_start.resize(static_cast<size_t>(n));
  int64_t position_start = 0, doc_start = 0;
  for (int64_t t = 0; t < n; ++t) {
    s.position_ids[t] = t - position_start;
    s.document_start[t] = doc_start;
    if (s.tokens[t] == eod) {
      if (config_.eod_mask_loss) s.loss_mask[t] = 0.0f;
      if (config_.reset_position_ids) position_start = t + 1;
      doc_start = t + 1;
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    if (s.labels[t] == pad) {
      s.loss_mask[t] = 0.0f;
      s.labels[t] = 0;  // so the embedding / loss can index it
    }
    if (s.tokens[t] == pad) s.tokens[t] = 0;
  }
  return s;
}

// --- Builder ----------------------------------------------------------------------------------

std::array<std::optional<GptDataset>, 3> build_gpt_dataset_splits(std::shared_ptr<const LowLevelDataset> dataset,
                                                                   std::string_view split,
                                                                   const std::array<std::optional<int64_t>, 3>& sizes,
                                                                   const GptDatasetConfig& config) {
  MT_CHECK(dataset != nullptr) << "build_gpt_dataset_splits needs a low-level dataset";
  const SplitMatrix matrix = split_matrix_from_vector(parse_and_normalize_split(split));
  const int64_t n = dataset->num_sequences();
  std::array<std::optional<GptDataset>, 3> out;
  for (int s = 0; s < 3; ++s) {
    if (!matrix[s]) continue;
    const auto [begin, end] = split_sequence_range(*matrix[s], n);
    std::vector<int32_t> indices(static_cast<size_t>(std::max<int64_t>(0, end - begin)));
    std::iota(indices.begin(), indices.end(), static_cast<int32_t>(begin));
    out[s].emplace(dataset, std::move(indices), sizes[s], static_cast<Split>(s), config);
  }
  return out;
}

}  // namespace mt
