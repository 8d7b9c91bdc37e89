// infer/sampler.h: greedy forms, the top-k and nucleus (top-p) candidate sets, the draw's
// frequencies against the renormalised probabilities, seeds, log-probabilities, and refusals.
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "infer/sampler.h"
#include "testing.h"

namespace mt {
namespace {

// Logits whose softmax is exactly `probs` (up to a constant).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(Sampler, TopKOneAndTemperatureZeroAreGreedy) {
  const std::vector<float> logits = {0.1f, 2.5f, -1.0f, 2.4f, 0.0f};
  Sampler s(5);
  SamplingParams p;
  p.top_k = 1;
  for (uint64_t step = 0; step < 50; ++step) EXPECT_EQ(s.sample(logits.data(), p, 0, step), 1);
  p.top_k = 0;
  p.temperature = 0.0f;
  for (uint64_t step = 0; step < 50; ++step) EXPECT_EQ(s.sample(logits.data(), p, 3, step), 1);
}

// Draw many times; the frequency of each token against the probabilities renormalised over `kept`.
void expect_frequencies(const std::vector<double>& probs, const SamplingParams& p, const std::set<int32_t>& kept) {
  const std::vector<float> logits = logits_of(probs);
  Sampler s(static_cast<int64_t>(probs.size()));
  std::map<int32_t, int> count;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++count[s.sample(logits.data(), p, 7, static_cast<uint64_t>(i))];
  double mass = 0.0;
  for (int32_t t : kept) mass += probs[t];
  for (const auto& [token, n] : count) EXPECT_TRUE(kept.count(token)) << "token " << token << " drawn " << n << " times";
  for (int32_t t : kept) {
    const double want = probs[t] / mass, got = static_cast<double>(count[t]) / draws;
    EXPECT_NEAR(got, want, 4.0 * std::sqrt(want * (1.0 - want) / draws) + 1e-3) << "token " << t;
  }
}

TEST(Sampler, TopKDrawsFromTheKMostLikelyInProportion) {
  SamplingParams p;
  p.top_k = 3;
  expect_frequencies({0.05, 0.3, 0.1, 0.25, 0.2, 0.1}, p, {1, 3, 4});
}

// The nucleus is the shortest prefix (by probability) whose mass reaches top_p: 0.3 + 0.25 = 0.55
// < 0.6, so 0.2 joins (0.75); at top_p = 0.55 exactly two tokens reach it.
TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<double> probs = {0.05, 0.3, 0.1, 0.25, 0.2, 0.1};
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 0.6f;
  expect_frequencies(probs, p, {1, 3, 4});
  p.top_p = 0.54f;
  expect_frequencies(probs, p, {1, 3});
  p.top_p = 1.0f;
  expect_frequencies(probs, p, {0, 1, 2, 3, 4, 5});
}

// Both: the top k first, then the nucleus of their renormalised probabilities. The top 3 hold
// 0.3, 0.25, 0.2 (mass 0.75): renormalised 0.4, 0.333, 0.267, so top_p 0.7 keeps two of them.
TEST(Sampler, TopKThenTopPWithinIt) {
  const std::vector<double> probs = {0.05, 0.3, 0.1, 0.25, 0.2, 0.1};
  SamplingParams p;
  p.top_k = 3;
  p.top_p = 0.7f;
  expect_frequencies(probs, p, {1, 3});
  p.top_p = 0.75f;  // 0.4 + 0.333 = 0.733 < 0.75: the third joins
  expect_frequencies(probs, p, {1, 3, 4});
}

TEST(Sampler, TemperatureSharpensAndTheSeedDecides) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  std::vector<double> sharp;  // p^(1/T), T = 0.5
  for (double q : probs) sharp.push_back(q * q / 0.3);
  SamplingParams p;
  p.top_k = 0;
  p.temperature = 0.5f;
  // Logits of `probs` at temperature 0.5 draw like `sharp` at temperature 1.
  const std::vector<float> logits = logits_of(probs);
  Sampler s(4);
  std::vector<int> count(4);
  for (int i = 0; i < 40000; ++i) ++count[s.sample(logits.data(), p, 1, static_cast<uint64_t>(i))];
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(count[t] / 40000.0, sharp[t], 0.01) << t;
  // The same (seed, sequence, step) gives the same token; another seed another sequence of tokens.
  std::vector<int32_t> a, b, c;
  SamplingParams other = p;
  other.seed = 99;
  for (uint64_t i = 0; i < 64; ++i) {
    a.push_back(s.sample(logits.data(), p, 5, i));
    b.push_back(s.sample(logits.data(), p, 5, i));
    c.push_back(s.sample(logits.data(), other, 5, i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, LogProbabilitiesAreTheModelsOwn) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> logits = logits_of(probs);
  Sampler s(4);
  for (int32_t t = 0; t < 4; ++t) EXPECT_NEAR(s.log_prob(logits.data(), t), std::log(probs[t]), 1e-6);
  const auto top = s.top_log_probs(logits.data(), 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].first, 3);
  EXPECT_EQ(top[1].first, 2);
  EXPECT_NEAR(top[1].second, std::log(0.3), 1e-6);
}

TEST(Sampler, OnlyTheTrueVocabularyIsDrawn) {
  std::vector<float> logits(8, 0.0f);
  logits[6] = logits[7] = 50.0f;  // padding rows past the vocabulary of 6
  Sampler s(6);
  SamplingParams p;
  p.top_k = 0;
  for (uint64_t i = 0; i < 200; ++i) EXPECT_LT(s.sample(logits.data(), p, 0, i), 6);
  p.top_k = 1;
  EXPECT_LT(s.sample(logits.data(), p, 0, 0), 6);
}

TEST(Sampler, BadSettingsAreRefused) {
  SamplingParams p;
  p.top_k = 1;  // the default, greedy: top-p needs --top_k 0 (or k > 1)
  p.top_p = 0.9f;
  test::expect_error_mentioning([&] { p.validate(); }, "pass --top_k 0 (or a k > 1) with --top_p");
  p = {};
  p.temperature = -1.0f;
  test::expect_error_mentioning([&] { p.validate(); }, "temperature -1");
  p = {};
  p.top_p = 1.5f;
  test::expect_error_mentioning([&] { p.validate(); }, "top_p 1.5");
  p = {};
  p.top_k = -2;
  test::expect_error_mentioning([&] { p.validate(); }, "top_k -2");
}

}  // namespace
}  // namespace mt
