#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "base/rng.h"

namespace mt {

void SamplingParams::validate() const {
  MT_CHECK(std::isfinite(temperature) && temperature >= 0.0f && temperature <= 100.0f)
      << "temperature " << temperature << " must be in [0, 100] (0: greedy)";
  MT_CHECK(top_k >= 0) << "top_k " << top_k << " must be >= 0 (0: no limit, 1: greedy)";
  MT_CHECK(top_p >= 0.0f && top_p <= 1.0f) << "top_p " << top_p << " must be in [0, 1] (0: off)";
  // Greedy (top_k 1, the default) would ignore top_p: say so rather than drop it.
  MT_CHECK(!(top_k == 1 && top_p > 0.0f)) << "top_p " << top_p << " with top_k 1 (greedy) has no effect; pass --top_k 0 "
                                          << "(or a k > 1) with --top_p";
}

int32_t Sampler::sample(const float* logits, const SamplingParams& p, uint64_t sequence, uint64_t step) {
  if (p.greedy()) return static_cast<int32_t>(std::max_element(logits, logits + vocab_) - logits);
  // Candidates by decreasing logit (ties by id, so the order does not depend on the sort).
  order_.resize(static_cast<size_t>(vocab_));
  std::iota(order_.begin(), order_.end(), 0);
  const auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, vocab_) : vocab_;
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
  order_.resize(static_cast<size_t>(k));
  probs_.resize(order_.size());
  const double top = logits[order_[0]];
  double total = 0.0;
  for (size_t i = 0; i < order_.size(); ++i) total += probs_[i] = std::exp((logits[order_[i]] - top) / p.temperature);
  size_t kept = order_.size();
  if (p.top_p > 0.0f) {  // the shortest prefix whose probability reaches top_p
    double mass = 0.0;
    for (kept = 0; kept < order_.size();) {
      mass += probs_[kept++] / total;
      if (mass >= p.top_p) break;
    }
    total = std::accumulate(probs_.begin(), probs_.begin() + static_cast<std::ptrdiff_t>(kept), 0.0);
  }
  const RngStream rng{p.seed, 0x5a3b1e00ULL + sequence};
  const double u = rng.uniform(step) * total;
  double acc = 0.0;
  for (size_t i = 0; i + 1 < kept; ++i)
    if ((acc += probs_[i]) > u) return order_[i];
  return order_[kept - 1];
}

float Sampler::log_prob(const float* logits, int32_t token) const {
  const float top = *std::max_element(logits, logits + vocab_);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_; ++i) sum += std::exp(static_cast<double>(logits[i]) - top);
  return static_cast<float>(logits[token] - top - std::log(sum));
}

std::vector<std::pair<int32_t, float>> Sampler::top_log_probs(const float* logits, int64_t n) {
  n = std::min(n, vocab_);
  order_.resize(static_cast<size_t>(vocab_));
  std::iota(order_.begin(), order_.end(), 0);
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  std::vector<std::pair<int32_t, float>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({order_[i], log_prob(logits, order_[i])});
  return out;
}

}  // namespace mt
