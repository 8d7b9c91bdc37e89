#include "serve/service.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "serve/requests.h"
#include "serve/responses.h"

namespace mt {

namespace {

using json = nlohmann::json;

json sequence_to_json(const JobSequence& s) {
  const GenerationRequest& r = s.request;
  json j = {{"prompt", r.prompt},
            {"tokens", r.tokens_to_generate},
            {"temperature", r.sampling.temperature},
            {"top_k", r.sampling.top_k},
            {"top_p", r.sampling.top_p},
            {"seed", r.sampling.seed},
            {"log_probs", r.log_probs},
            {"top_n", r.top_n_log_probs},
            {"stream", r.stream},
            {"stop", s.stop}};
  if (r.stop_token) j["stop_token"] = *r.stop_token;
  return j;
}

JobSequence sequence_from_json(const json& j) {
  JobSequence s;
  GenerationRequest& r = s.request;
  r.prompt = j.at("prompt").get<std::vector<int32_t>>();
  r.tokens_to_generate = j.at("tokens").get<int64_t>();
  r.sampling.temperature = j.at("temperature").get<float>();
  r.sampling.top_k = j.at("top_k").get<int64_t>();
  r.sampling.top_p = j.at("top_p").get<float>();
  r.sampling.seed = j.at("seed").get<uint64_t>();
  r.log_probs = j.at("log_probs").get<bool>();
  r.top_n_log_probs = j.at("top_n").get<int64_t>();
  r.stream = j.at("stream").get<uint64_t>();
  if (j.contains("stop_token")) r.stop_token = j.at("stop_token").get<int32_t>();
  s.stop = j.at("stop").get<std::vector<std::string>>();
  return s;
}

template <typename T>
void append_from(std::vector<T>& to, const std::vector<T>& from) {
  to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(std::min(to.size(), from.size())), from.end());
}

}  // namespace

Job::Job(std::vector<JobSequence> sequences) : sequences_(std::move(sequences)), results_(sequences_.size()) {}

uint64_t Job::wait(uint64_t seen) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return version_ != seen || finished_ == sequences_.size(); });
  return version_;
}

bool Job::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_ == sequences_.size();
}

GenerationService::GenerationService(Generator& generator, const Tokenizer& tokenizer, Communicator* group,
                                     int64_t max_jobs)
    : generator_(generator), tokenizer_(tokenizer), group_(group && group->size() > 1 ? group : nullptr),
      max_jobs_(max_jobs) {}

std::vector<int32_t> GenerationService::encode(std::string_view text, bool with_specials) const {
  std::lock_guard<std::mutex> lock(tokenizer_mutex_);
  std::vector<int32_t> ids;
  if (with_specials) tokenizer_.encode_into(text, ids);
  else tokenizer_.encode_without_specials(text, ids);
  return ids;
}

std::string GenerationService::decode(std::span<const int32_t> ids) const {
  std::lock_guard<std::mutex> lock(tokenizer_mutex_);
  return tokenizer_.decode(ids);
}

int64_t GenerationService::active_jobs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_;
}

std::shared_ptr<Job> GenerationService::submit(std::vector<JobSequence> sequences, const std::string& field) {
  for (const JobSequence& s : sequences) {
    try {
      generator_.validate(s.request);
    } catch (const Error& e) {
      throw RequestError(400, field, e.what());
    }
  }
  auto job = std::make_shared<Job>(std::move(sequences));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) throw RequestError(503, "", "the server is shutting down");
    if (active_ >= max_jobs_)
      throw RequestError(429, "", "the server is busy: " + std::to_string(max_jobs_) +
                                      " requests are running (--max-concurrent-requests); retry later");
    ++active_;
    pending_.push_back(job);
  }
  work_.notify_one();
  return job;
}

void GenerationService::cancel(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job->done()) return;
    cancel_requests_.push_back(job);
  }
  work_.notify_one();
}

int64_t GenerationService::cancelled_jobs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

bool GenerationService::stop_check(size_t id, const std::vector<int32_t>& generated) const {
  const Admitted& a = admitted_.at(id);
  if (a.stop.empty()) return false;
  const std::string text = decode(generated);
  return std::any_of(a.stop.begin(), a.stop.end(), [&](const std::string& s) { return text.find(s) != std::string::npos; });
}

void GenerationService::publish(size_t id, bool finished) {
  const Admitted& a = admitted_.at(id);
  if (!a.job) return;
  const GenerationResult& from = generator_.result(id);
  bool job_done = false;
  {
    std::lock_guard<std::mutex> lock(a.job->mutex_);
    GenerationResult& to = a.job->results_[a.index];
    append_from(to.tokens, from.tokens);
    append_from(to.prompt_log_probs, from.prompt_log_probs);
    append_from(to.log_probs, from.log_probs);
    append_from(to.top_log_probs, from.top_log_probs);
    if (finished) {
      to.finish_reason = from.finish_reason;
      job_done = ++a.job->finished_ == a.job->sequences_.size();
    }
    ++a.job->version_;
  }
  a.job->changed_.notify_all();
  if (job_done) {
    std::lock_guard<std::mutex> lock(mutex_);
    --active_;
  }
}

void GenerationService::share(Changes& changes) {
  if (!group_) return;
  std::string bytes;
  if (group_->rank() == 0) {
    json j = {{"sequences", json::array()}, {"cancelled", changes.cancelled}, {"shutdown", changes.shutdown}};
    for (const JobSequence& s : changes.sequences) j["sequences"].push_back(sequence_to_json(s));
    bytes = j.dump();
  }
  int64_t size = static_cast<int64_t>(bytes.size());
  group_->broadcast(TensorView(&size, DType::u8, {static_cast<int64_t>(sizeof size)}), 0);
  bytes.resize(static_cast<size_t>(size));
  group_->broadcast(TensorView(bytes.data(), DType::u8, {size}), 0);
  if (group_->rank() == 0) return;
  const json j = json::parse(bytes);
  changes = Changes();
  for (const json& s : j.at("sequences")) changes.sequences.push_back(sequence_from_json(s));
  changes.cancelled = j.at("cancelled").get<std::vector<size_t>>();
  changes.shutdown = j.at("shutdown").get<bool>();
}

bool GenerationService::apply_and_step(Changes& changes) {
  for (size_t id : changes.cancelled) {
    generator_.cancel(id);
    admitted_.erase(id);
  }
  for (size_t i = 0; i < changes.sequences.size(); ++i) {
    JobSequence& s = changes.sequences[i];
    const size_t id = generator_.submit(s.request);
    Admitted& a = admitted_[id];
    if (!changes.owners.empty()) std::tie(a.job, a.index) = changes.owners[i];
    a.stop = std::move(s.stop);
  }
  if (changes.shutdown) return false;
  if (generator_.idle()) return true;
  const std::vector<size_t> finished =
      generator_.step([this](size_t id, const std::vector<int32_t>& generated) { return stop_check(id, generated); });
  for (const auto& [id, a] : admitted_) publish(id, std::find(finished.begin(), finished.end(), id) != finished.end());
  for (size_t id : finished) {
    generator_.release(id);
    admitted_.erase(id);
  }
  return true;
}

bool GenerationService::end_job(Job& job, const std::string& reason, const std::string& error) {
  bool ended = false;
  {
    std::lock_guard<std::mutex> lock(job.mutex_);
    for (GenerationResult& r : job.results_)
      if (r.finish_reason.empty()) r.finish_reason = reason;
    ended = job.finished_ < job.sequences_.size();
    job.finished_ = job.sequences_.size();
    if (ended) job.error_ = error;
    ++job.version_;
  }
  job.changed_.notify_all();
  return ended;
}

void GenerationService::fail_all(const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  draining_ = true;
  for (const std::shared_ptr<Job>& job : pending_) end_job(*job, "error", error);
  for (const auto& [id, a] : admitted_)
    if (a.job) end_job(*a.job, "error", error);
  pending_.clear();
  active_ = 0;
}

void GenerationService::run(const std::atomic<bool>& stop) {
  try {
    serve(stop);
  } catch (const std::exception& e) {
    fail_all(std::string("the server failed: ") + e.what());
    throw;
  }
}

void GenerationService::serve(const std::atomic<bool>& stop) {
  for (;;) {
    Changes changes;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        if (stop.load()) draining_ = true;
        if (!generator_.idle() || !pending_.empty() || !cancel_requests_.empty() || draining_) break;
        work_.wait_for(lock, std::chrono::milliseconds(100));
      }
      for (const std::shared_ptr<Job>& job : cancel_requests_) {
        if (end_job(*job, "cancelled", "")) {
          --active_;
          ++cancelled_;
        }
        pending_.erase(std::remove(pending_.begin(), pending_.end(), job), pending_.end());
        for (const auto& [id, a] : admitted_)
          if (a.job == job) changes.cancelled.push_back(id);
      }
      cancel_requests_.clear();
      for (const std::shared_ptr<Job>& job : pending_)
        for (size_t i = 0; i < job->sequences_.size(); ++i) {
          changes.sequences.push_back(job->sequences_[i]);
          changes.owners.emplace_back(job, i);
        }
      pending_.clear();
      changes.shutdown = draining_ && generator_.idle() && changes.sequences.empty();
    }
    share(changes);
    if (!apply_and_step(changes)) return;
  }
}

void GenerationService::follow() {
  MT_CHECK(group_ && group_->rank() != 0) << "GenerationService::follow runs on the ranks after the first";
  for (;;) {
    Changes changes;
    share(changes);
    if (!apply_and_step(changes)) return;
  }
}

}  // namespace mt
