// Owns choosing the next token from a row of logits, as Megatron's inference sampling does:
// greedy (top_k = 1, or temperature 0), or a draw from softmax(logits / temperature) restricted to
// the top_k most likely tokens (top_k > 1) and/or to the nucleus, the smallest set of most likely
// tokens whose probability reaches top_p (top_p > 0; within the top k, renormalised, when both are
// set, as Megatron's dynamic engine filters top-k then top-p). The draw is a
// counter-based random number keyed by (seed, sequence, step): the same seed gives the same tokens
// on every rank and every run, however requests are batched. Log-probabilities are those of the
// model's own distribution (softmax of the raw logits). Only ids below the true vocabulary size
// are candidates (never a padding row).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace mt {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 1;         // 0: no limit; 1: greedy
  float top_p = 0.0f;        // 0: off
  uint64_t seed = 0;

  // mt::Error for values Megatron refuses (negative temperature or top_k, top_p outside [0, 1]) and
  // top_p > 0 with greedy top_k 1, where it would do nothing. (Megatron's static generate and PUT
  // /api refuse top-k with top-p; their callers check that.)
  void validate() const;
  bool greedy() const { return top_k == 1 || temperature == 0.0f; }
};

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size) : vocab_(vocab_size) {}

  // The next token from logits[0, vocab) for draw number `step` of sequence `sequence`.
  int32_t sample(const float* logits, const SamplingParams& p, uint64_t sequence, uint64_t step);
  // log softmax(logits)[token].
  float log_prob(const float* logits, int32_t token) const;
  // The n most likely tokens and their log-probabilities, most likely first.
  std::vector<std::pair<int32_t, float>> top_log_probs(const float* logits, int64_t n);

 private:
  int64_t vocab_;
  std::vector<int32_t> order_;  // token ids, sorted by logit (scratch, reused)
  std::vector<double> probs_;
};

}  // namespace mt
