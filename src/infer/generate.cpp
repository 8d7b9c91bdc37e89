#include "infer/generate.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"

namespace mt {

Generator::Generator(InferenceEngine& engine, int64_t eod)
    : engine_(engine), eod_(eod), sampler_(engine.config().vocab_size) {
  for (int64_t s = engine.options().slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

void Generator::validate(const GenerationRequest& r) const {
  const int64_t max_len = engine_.max_sequence_length(), vocab = engine_.config().vocab_size;
  MT_CHECK(!r.prompt.empty()) << "the prompt is empty";
  MT_CHECK(r.tokens_to_generate >= 0) << "tokens to generate must be >= 0, got " << r.tokens_to_generate;
  // (Compared as a difference: a huge token count must not overflow past the check.)
  MT_CHECK(r.tokens_to_generate <= max_len - static_cast<int64_t>(r.prompt.size()))
      << r.prompt.size() << " prompt tokens + " << r.tokens_to_generate << " to generate exceed the " << max_len
      << " positions a sequence may hold";
  for (int32_t t : r.prompt) MT_CHECK(t >= 0 && t < vocab) << "token id " << t << " is outside [0, " << vocab << ")";
  if (r.stop_token) {
    MT_CHECK(*r.stop_token >= 0 && *r.stop_token < vocab) << "stop token " << *r.stop_token << " is outside [0, " << vocab << ")";
  }
  r.sampling.validate();
}

size_t Generator::submit(GenerationRequest request) {
  validate(request);
  const size_t id = next_id_++;
  requests_[id].request = std::move(request);
  waiting_.push_back(id);
  return id;
}

void Generator::cancel(size_t id) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  for (size_t i = 0; i < running_.size(); ++i)
    if (running_[i].id == id) {
      free_slots_.push_back(running_[i].slot);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  requests_.erase(id);
}

std::vector<GenerationResult> Generator::run(std::vector<GenerationRequest> requests, const StopCheck& stop,
                                             GenerationStats* stats) {
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      validate(requests[i]);
    } catch (const Error& e) {
      MT_FAIL() << "request " << i << ": " << e.what();
    }
  }
  std::vector<size_t> ids;
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].stream = i;
    ids.push_back(submit(std::move(requests[i])));
  }
  const StopCheck by_index = [&](size_t id, const std::vector<int32_t>& generated) {
    return stop(static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin()), generated);
  };
  while (!idle()) step(stop ? by_index : StopCheck(), stats);
  std::vector<GenerationResult> results;
  for (size_t id : ids) {
    results.push_back(std::move(requests_.at(id).result));
    release(id);
  }
  return results;
}

std::vector<size_t> Generator::step(const StopCheck& stop, GenerationStats* stats) {
  std::vector<size_t> finished;
  if (idle()) return finished;
  while (!waiting_.empty() && !free_slots_.empty()) {
    running_.push_back({waiting_.front(), free_slots_.back(), requests_.at(waiting_.front()).request.prompt, 0});
    waiting_.pop_front();
    free_slots_.pop_back();
  }
  // Decodes first (one token each), then prompt pieces while the step has room.
  const int64_t budget = engine_.options().max_step_tokens;
  chunks_.clear();
  stepped_.clear();
  int64_t tokens = 0, prefill = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < running_.size(); ++i) {
      Running& r = running_[i];
      const GenerationRequest& q = requests_.at(r.id).request;
      const int64_t prompt = static_cast<int64_t>(q.prompt.size());
      const int64_t pending = static_cast<int64_t>(r.sequence.size()) - r.fed;
      const bool decode = r.fed >= prompt;
      if ((pass == 0) != decode || tokens >= budget) continue;
      const int64_t count = std::min(pending, budget - tokens);
      chunks_.push_back({r.slot, r.fed, r.sequence.data() + r.fed, count, q.log_probs && !decode});
      stepped_.push_back(i);
      tokens += count;
      if (!decode) prefill += count;
    }
  const auto start = std::chrono::steady_clock::now();
  const TensorView logits = engine_.step(chunks_);
  const int64_t width = logits.dim(1);
  int64_t row = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    Running& r = running_[stepped_[c]];
    const GenerationRequest& q = requests_.at(r.id).request;
    GenerationResult& out = requests_.at(r.id).result;
    const int64_t prompt = static_cast<int64_t>(q.prompt.size());
    const int64_t rows = chunks_[c].all_logits ? chunks_[c].count : 1;
    if (chunks_[c].all_logits)  // row k predicts the token after it: a prompt token's log-probability
      for (int64_t k = 0; k < rows && r.fed + k + 1 < prompt; ++k)
        out.prompt_log_probs.push_back(sampler_.log_prob(logits.f32() + (row + k) * width, q.prompt[r.fed + k + 1]));
    r.fed += chunks_[c].count;
    const float* last = logits.f32() + (row + rows - 1) * width;
    row += rows;
    if (r.fed < static_cast<int64_t>(r.sequence.size())) continue;  // more of the prompt next step
    const int64_t generated = static_cast<int64_t>(out.tokens.size());
    if (generated < q.tokens_to_generate) {
      const int32_t token = sampler_.sample(last, q.sampling, q.stream, static_cast<uint64_t>(generated));
      if (q.log_probs) out.log_probs.push_back(sampler_.log_prob(last, token));
      if (q.top_n_log_probs > 0) out.top_log_probs.push_back(sampler_.top_log_probs(last, q.top_n_log_probs));
      out.tokens.push_back(token);
      r.sequence.push_back(token);
      if (token == q.stop_token.value_or(static_cast<int32_t>(eod_)))
        out.finish_reason = "eod";
      else if (stop && stop(r.id, out.tokens))
        out.finish_reason = "stop";
    }
    if (out.finish_reason.empty() && static_cast<int64_t>(out.tokens.size()) >= q.tokens_to_generate)
      out.finish_reason = "length";
  }
  if (stats) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (prefill > 0 ? stats->prefill_seconds : stats->decode_seconds) += seconds;
    stats->prefill_tokens += prefill;
    stats->decode_tokens += tokens - prefill;
  }
  // Finished requests give their slots back (their last token is never fed: nothing reads it).
  for (size_t i = running_.size(); i-- > 0;) {
    if (requests_.at(running_[i].id).result.finish_reason.empty()) continue;
    finished.push_back(running_[i].id);
    free_slots_.push_back(running_[i].slot);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return finished;
}

}  // namespace mt
