// Owns generation over the inference engine: requests (a prompt of token ids, how many tokens to
// generate, sampling, log-probabilities) run with continuous batching: each request takes a free
// cache slot, its prompt is prefilled (in pieces when it is longer than a step), then every step
// decodes one token for each running request; a request that finishes (its token budget, the EOD
// token, or the caller's stop check) frees its slot for the next waiting one between steps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "infer/engine.h"
#include "infer/sampler.h"

namespace mt {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // at least one token
  int64_t tokens_to_generate = 16;
  SamplingParams sampling;
  bool log_probs = false;       // of the prompt's tokens (all but the first) and of each generated one
  int64_t top_n_log_probs = 0;  // the n most likely tokens at each generated position
};

struct GenerationResult {
  std::vector<int32_t> tokens;          // generated (an EOD that ended it included)
  std::vector<float> prompt_log_probs;  // [prompt - 1] when asked
  std::vector<float> log_probs;         // [tokens] when asked
  std::vector<std::vector<std::pair<int32_t, float>>> top_log_probs;  // [tokens] when asked
  std::string finish_reason;            // "length", "eod" or "stop"
};

struct GenerationStats {
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0.0, decode_seconds = 0.0;  // steps with any prefill count as prefill
};

// Called after each generated token with the request's index and its tokens so far; true ends
// the request ("stop": stop strings).
using StopCheck = std::function<bool(size_t request, const std::vector<int32_t>& generated)>;

class Generator {
 public:
  // eod: the token that ends a sequence (-1: none).
  Generator(InferenceEngine& engine, int64_t eod);

  // Runs every request to completion. mt::Error, before any step, for a request that cannot fit
  // (empty prompt, prompt + tokens beyond the engine's sequence length, bad sampling or ids).
  std::vector<GenerationResult> run(const std::vector<GenerationRequest>& requests, const StopCheck& stop = {},
                                    GenerationStats* stats = nullptr);

 private:
  InferenceEngine& engine_;
  int64_t eod_;
  Sampler sampler_;
};

}  // namespace mt
