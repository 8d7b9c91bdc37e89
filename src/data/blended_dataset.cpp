// Owns dataset blending (see blended_dataset.h).
#include "data/blended_dataset.h"

#include <cmath>
#include <cstdlib>

#include "base/error.h"

namespace mt {

namespace {
// Python's float(word), close enough for weights: the whole word must be a number.
std::optional<double> as_number(const std::string& word) {
  if (word.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  if (end != word.c_str() + word.size()) return std::nullopt;
  return v;
}
}  // namespace

Blend parse_blend(const std::vector<std::string>& words, const std::string& flag) {
  MT_CHECK(!words.empty()) << flag << " needs at least one dataset prefix";
  const bool weighted = words.size() % 2 == 0 && as_number(words[0]).has_value();
  Blend blend;
  if (!weighted) {
    for (const std::string& w : words) {
      MT_CHECK(!as_number(w)) << flag << ": '" << w << "' looks like a weight, but the list is not weight/prefix "
                              << "pairs (" << words.size() << " words); give W1 P1 W2 P2 ... or only prefixes";
      blend.prefixes.push_back(w);
    }
    return blend;
  }
  std::vector<double> weights;
  for (size_t i = 0; i < words.size(); i += 2) {
    const std::optional<double> w = as_number(words[i]);
    MT_CHECK(w.has_value()) << flag << ": expected a weight before prefix '" << words[i + 1] << "', got '" << words[i]
                            << "'; give W1 P1 W2 P2 ... or only prefixes";
    MT_CHECK(!as_number(words[i + 1])) << flag << ": expected a dataset prefix after weight " << words[i] << ", got '"
                                       << words[i + 1] << "'";
    MT_CHECK(std::isfinite(*w) && *w >= 0.0) << flag << ": weight " << words[i] << " must be a finite number >= 0";
    weights.push_back(*w);
    blend.prefixes.push_back(words[i + 1]);
  }
  MT_CHECK(numpy_sum(weights) > 0.0) << flag << ": the weights sum to zero";
  blend.weights = weights;
  return blend;
}

double numpy_sum(std::span<const double> a) {
  const size_t n = a.size();
  if (n < 8) {
    double res = 0.0;
    for (double v : a) res += v;
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - n % 8; i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_sum(a.subspan(0, n2)) + numpy_sum(a.subspan(n2));
}

std::vector<double> normalize_weights(std::span<const double> weights) {
  const double sum = numpy_sum(weights);
  MT_CHECK(sum > 0.0) << "blend weights sum to " << sum;
  std::vector<double> out;
  for (double w : weights) out.push_back(w / sum);
  return out;
}

std::vector<int64_t> blend_dataset_sizes(std::span<const double> normalized_weights, int64_t target, double surplus) {
  std::vector<int64_t> out;
  for (double w : normalized_weights)
    out.push_back(static_cast<int64_t>(std::ceil(std::ceil(static_cast<double>(target) * w) * (1.0 + surplus))));
  return out;
}

void build_blending_indices(std::span<const double> weights, int64_t size, std::vector<int16_t>& dataset_index,
                            std::vector<int64_t>& dataset_sample_index) {
  MT_CHECK(!weights.empty() && weights.size() < 32767) << "a blend holds 1 to 32766 datasets, not " << weights.size();
  dataset_index.assign(static_cast<size_t>(size), 0);
  dataset_sample_index.assign(static_cast<size_t>(size), 0);
  std::vector<int64_t> current(weights.size(), 0);
  for (int64_t s = 0; s < size; ++s) {
    const double at = std::max(static_cast<double>(s), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(current[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(current[d]);
      if (error > best_error) best_error = error, best = d;
    }
    dataset_index[static_cast<size_t>(s)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(s)] = current[best]++;
  }
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const GptSampleDataset>> datasets,
                               std::vector<double> weights, int64_t size, Split split)
    : datasets_(std::move(datasets)), split_(split) {
  MT_CHECK(!datasets_.empty() && datasets_.size() == weights.size())
      << "a blend needs one weight per dataset (" << datasets_.size() << " datasets, " << weights.size() << " weights)";
  for (double w : weights) MT_CHECK(w > 0.0) << "blend weights must be positive, got " << w;
  for (const auto& d : datasets_)
    MT_CHECK(d && d->sequence_length() == datasets_.front()->sequence_length()) << "blended datasets differ in seq length";
  MT_CHECK(size >= 0) << "negative blend size " << size;
  weights_ = normalize_weights(weights);
  build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
  std::vector<int64_t> used(datasets_.size(), 0);
  for (int16_t d : dataset_index_) ++used[static_cast<size_t>(d)];
  for (size_t d = 0; d < datasets_.size(); ++d)
    MT_CHECK(used[d] <= datasets_[d]->size())
        << "the " << split_name(split_) << " blend asks dataset " << d << " for " << used[d] << " samples, more than its "
        << datasets_[d]->size() << " (Megatron's mid_level_dataset_surplus is too small for this blend)";
}

GptSample BlendedDataset::get_sample(int64_t i) const {
  MT_CHECK(i >= 0 && i < size()) << "sample " << i << " is outside the " << split_name(split_) << " blend's " << size();
  const size_t k = static_cast<size_t>(i);
  return datasets_[static_cast<size_t>(dataset_index_[k])]->get_sample(dataset_sample_index_[k]);
}

}  // namespace mt
