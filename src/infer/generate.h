// Owns generation over the inference engine: requests (a prompt of token ids, how many tokens to
// generate, sampling, log-probabilities) run with continuous batching: each request takes a free
// cache slot, its prompt is prefilled (in pieces when it is longer than a step), then every step
// decodes one token for each running request; a request that finishes (its token budget, the EOD
// token, or the caller's stop check) frees its slot for the next waiting one between steps.
// Requests may be submitted at any time between steps (a server's), or all at once (run).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
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
  // The draws of this request are keyed by (sampling.seed, stream, step), never by what else is
  // running (run: the index); its logits are rounded as the step's batch shape rounds them, so a
  // draw at the edge between two tokens may, rarely, fall the other way in another batch.
  uint64_t stream = 0;
  // The token that ends this request in place of the generator's eod (Megatron's stop_token).
  std::optional<int32_t> stop_token;
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

// Called after each generated token with the request's id and its tokens so far; true ends the
// request ("stop": stop strings).
using StopCheck = std::function<bool(size_t request, const std::vector<int32_t>& generated)>;

class Generator {
 public:
  // eod: the token that ends a sequence (-1: none).
  Generator(InferenceEngine& engine, int64_t eod);

  // Queues a request and returns its id. mt::Error, and nothing queued, for a request that cannot
  // run (empty prompt, prompt + tokens beyond the engine's sequence length, bad sampling or ids).
  size_t submit(GenerationRequest request);
  // The check submit makes; reads only the engine's settings, so any thread may call it.
  void validate(const GenerationRequest& r) const;
  // Drops a waiting or running request (its slot is free for the next step) and its result.
  void cancel(size_t id);
  // Nothing waiting or running.
  bool idle() const { return waiting_.empty() && running_.empty(); }
  // One engine step over the running requests (free slots first go to waiting ones). Returns the
  // ids of the requests it finished.
  std::vector<size_t> step(const StopCheck& stop = {}, GenerationStats* stats = nullptr);
  // Request id's result (complete once step reported it finished), until released.
  const GenerationResult& result(size_t id) const { return requests_.at(id).result; }
  void release(size_t id) { requests_.erase(id); }

  // Submits every request (streams = their indices), steps until all finish, returns the results
  // in order. Validates them all before any step.
  std::vector<GenerationResult> run(std::vector<GenerationRequest> requests, const StopCheck& stop = {},
                                    GenerationStats* stats = nullptr);

 private:
  struct Request {
    GenerationRequest request;
    GenerationResult result;
  };
  // A request holding a cache slot.
  struct Running {
    size_t id = 0;
    int64_t slot = 0;
    std::vector<int32_t> sequence;  // prompt, then the generated tokens
    int64_t fed = 0;                // tokens of `sequence` in the cache
  };

  InferenceEngine& engine_;
  int64_t eod_;
  Sampler sampler_;
  size_t next_id_ = 0;
  std::map<size_t, Request> requests_;
  std::deque<size_t> waiting_;
  std::vector<int64_t> free_slots_;
  std::vector<Running> running_;
  std::vector<SequenceChunk> chunks_;  // one step's, with the running index of each
  std::vector<size_t> stepped_;
};

}  // namespace mt
