#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "base/error.h"

namespace mt {

namespace {

// A request holding a cache slot.
struct Running {
  size_t request = 0;
  int64_t slot = 0;
  std::vector<int32_t> sequence;  // prompt, then the generated tokens
  int64_t fed = 0;                // tokens of `sequence` in the cache
};

}  // namespace

Generator::Generator(InferenceEngine& engine, int64_t eod)
    : engine_(engine), eod_(eod), sampler_(engine.config().vocab_size) {}

std::vector<GenerationResult> Generator::run(const std::vector<GenerationRequest>& requests, const StopCheck& stop,
                                             GenerationStats* stats) {
  const int64_t max_len = engine_.max_sequence_length(), vocab = engine_.config().vocab_size;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& r = requests[i];
    MT_CHECK(!r.prompt.empty()) << "request " << i << ": the prompt is empty";
    MT_CHECK(r.tokens_to_generate >= 0) << "request " << i << ": tokens to generate must be >= 0";
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.tokens_to_generate;
    MT_CHECK(total <= max_len) << "request " << i << ": " << r.prompt.size() << " prompt tokens + "
                               << r.tokens_to_generate << " to generate exceed the " << max_len
                               << " positions a sequence may hold";
    for (int32_t t : r.prompt)
      MT_CHECK(t >= 0 && t < vocab) << "request " << i << ": token id " << t << " is outside [0, " << vocab << ")";
    r.sampling.validate();
  }
  std::vector<GenerationResult> results(requests.size());
  std::deque<size_t> waiting;
  for (size_t i = 0; i < requests.size(); ++i) waiting.push_back(i);
  std::vector<int64_t> free_slots;
  for (int64_t s = engine_.options().slots - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Running> running;
  std::vector<SequenceChunk> chunks;
  const int64_t budget = engine_.options().max_step_tokens;

  while (!waiting.empty() || !running.empty()) {
    while (!waiting.empty() && !free_slots.empty()) {
      running.push_back({waiting.front(), free_slots.back(), requests[waiting.front()].prompt, 0});
      waiting.pop_front();
      free_slots.pop_back();
    }
    // Decodes first (one token each), then prompt pieces while the step has room.
    chunks.clear();
    std::vector<size_t> stepped;  // indices into running, in chunk order
    int64_t tokens = 0, prefill = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < running.size(); ++i) {
        Running& r = running[i];
        const int64_t pending = static_cast<int64_t>(r.sequence.size()) - r.fed;
        const bool decode = pending == 1 && r.fed >= static_cast<int64_t>(requests[r.request].prompt.size());
        if ((pass == 0) != decode || tokens >= budget) continue;
        const int64_t count = std::min(pending, budget - tokens);
        const bool in_prompt = r.fed < static_cast<int64_t>(requests[r.request].prompt.size());
        chunks.push_back({r.slot, r.fed, r.sequence.data() + r.fed, count, requests[r.request].log_probs && in_prompt});
        stepped.push_back(i);
        tokens += count;
        if (!decode) prefill += count;
      }
    const auto start = std::chrono::steady_clock::now();
    const TensorView logits = engine_.step(chunks);
    const int64_t width = logits.dim(1);
    int64_t row = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      Running& r = running[stepped[c]];
      const GenerationRequest& q = requests[r.request];
      GenerationResult& out = results[r.request];
      const int64_t prompt = static_cast<int64_t>(q.prompt.size());
      const int64_t rows = chunks[c].all_logits ? chunks[c].count : 1;
      if (chunks[c].all_logits)  // row k predicts the token after it: a prompt token's log-probability
        for (int64_t k = 0; k < rows && r.fed + k + 1 < prompt; ++k)
          out.prompt_log_probs.push_back(sampler_.log_prob(logits.f32() + (row + k) * width, q.prompt[r.fed + k + 1]));
      r.fed += chunks[c].count;
      const float* last = logits.f32() + (row + rows - 1) * width;
      row += rows;
      if (r.fed < static_cast<int64_t>(r.sequence.size())) continue;  // more of the prompt next step
      const int64_t generated = static_cast<int64_t>(out.tokens.size());
      if (generated < q.tokens_to_generate) {
        const int32_t token = sampler_.sample(last, q.sampling, r.request, static_cast<uint64_t>(generated));
        if (q.log_probs) out.log_probs.push_back(sampler_.log_prob(last, token));
        if (q.top_n_log_probs > 0) out.top_log_probs.push_back(sampler_.top_log_probs(last, q.top_n_log_probs));
        out.tokens.push_back(token);
        r.sequence.push_back(token);
        if (token == eod_)
          out.finish_reason = "eod";
        else if (stop && stop(r.request, out.tokens))
          out.finish_reason = "stop";
      }
      if (out.finish_reason.empty() && static_cast<int64_t>(out.tokens.size()) >= q.tokens_to_generate)
        out.finish_reason = "length";
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (stats) {
      (prefill > 0 ? stats->prefill_seconds : stats->decode_seconds) += seconds;
      stats->prefill_tokens += prefill;
      stats->decode_tokens += tokens - prefill;
    }
    // Finished requests give their slots back (the last token is never fed: nothing reads it).
    for (size_t i = running.size(); i-- > 0;) {
      if (results[running[i].request].finish_reason.empty()) continue;
      free_slots.push_back(running[i].slot);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return results;
}

}  // namespace mt
