// Owns the generation loop behind the server. HTTP threads submit jobs (one request's prompts,
// already tokenized); one loop thread owns the Generator: between steps it takes the new jobs and
// cancellations, then steps, and publishes each job's progress (its tokens so far) for the HTTP
// thread waiting on it. Under tensor parallelism rank 0's loop broadcasts, before each step, what
// changed (new requests, cancellations, shutdown) and every other rank's follow() applies the same
// to its own Generator, so all ranks run identical steps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/tokenizer.h"
#include "infer/generate.h"

namespace mt {

// One prompt of a job, as the Generator will run it.
struct JobSequence {
  GenerationRequest request;
  std::vector<std::string> stop;  // strings whose appearance in the generated text ends it
};

// One HTTP request's sequences and their progress, shared by its HTTP thread and the loop.
class Job {
 public:
  explicit Job(std::vector<JobSequence> sequences);

  const std::vector<JobSequence>& sequences() const { return sequences_; }
  // Blocks until the progress moves past `seen` (a version from before), or the job is done.
  // Returns the new version. The results are read under lock() (see results()).
  uint64_t wait(uint64_t seen);
  bool done() const;
  std::unique_lock<std::mutex> lock() const { return std::unique_lock<std::mutex>(mutex_); }
  // Each sequence's result so far (finish_reason set once it ended). Hold lock() while reading.
  const std::vector<GenerationResult>& results() const { return results_; }
  // Why the server could not finish the job ("" when it did). Hold lock() while reading.
  const std::string& error() const { return error_; }

 private:
  friend class GenerationService;
  std::vector<JobSequence> sequences_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<GenerationResult> results_;
  size_t finished_ = 0;
  uint64_t version_ = 0;
  std::string error_;
};

class GenerationService {
 public:
  // group: the tensor-parallel ranks (null or size 1: this process alone); rank 0 runs run(), the
  // others follow(). max_jobs: jobs admitted at once (waiting or running); more get 429.
  GenerationService(Generator& generator, const Tokenizer& tokenizer, Communicator* group, int64_t max_jobs);

  // HTTP threads (rank 0). Admits a job: RequestError 503 while draining, 429 beyond max_jobs,
  // 400 naming `field` for a sequence the Generator would refuse (too long, bad ids).
  std::shared_ptr<Job> submit(std::vector<JobSequence> sequences, const std::string& field = "prompt");
  // The job's sequences end now (its client left); they free their cache slots before the next step.
  void cancel(const std::shared_ptr<Job>& job);
  // Its ids and sizes; text goes through encode and decode, which any thread may call (they are
  // serialized: not every tokenizer is thread-safe).
  const Tokenizer& tokenizer() const { return tokenizer_; }
  std::vector<int32_t> encode(std::string_view text, bool with_specials = true) const;
  std::string decode(std::span<const int32_t> ids) const;
  int64_t active_jobs() const;
  int64_t cancelled_jobs() const;  // ended by cancel() before they finished
  bool draining() const { return draining_; }

  // Rank 0's loop: serves jobs until `stop` is set (a signal handler's flag, polled), then refuses
  // new jobs, finishes the admitted ones, tells the followers to stop, and returns. When a step
  // fails, every job ends with the error (their clients get 500), new ones are refused, and the
  // exception propagates.
  void run(const std::atomic<bool>& stop);
  // The other ranks: applies rank 0's broadcasts until it stops.
  void follow();

 private:
  struct Admitted {  // a sequence in the Generator
    std::shared_ptr<Job> job;  // null on followers
    size_t index = 0;
    std::vector<std::string> stop;
  };
  struct Changes {
    std::vector<JobSequence> sequences;
    std::vector<std::pair<std::shared_ptr<Job>, size_t>> owners;  // rank 0: each sequence's job and index
    std::vector<size_t> cancelled;                                 // Generator ids
    bool shutdown = false;
  };

  // Applies a step's changes (the same on every rank), steps, and on rank 0 publishes progress.
  // Returns false at shutdown.
  bool apply_and_step(Changes& changes);
  void share(Changes& changes);  // rank 0 broadcasts, followers receive
  bool stop_check(size_t id, const std::vector<int32_t>& generated) const;
  void serve(const std::atomic<bool>& stop);
  // Ends every job, waiting or admitted, with `error`.
  void fail_all(const std::string& error);
  // Ends `job` now (its unfinished sequences get `reason`); false when it had already ended.
  static bool end_job(Job& job, const std::string& reason, const std::string& error);
  void publish(size_t id, bool finished);

  Generator& generator_;
  const Tokenizer& tokenizer_;
  mutable std::mutex tokenizer_mutex_;
  Communicator* group_;
  int64_t max_jobs_;

  mutable std::mutex mutex_;  // guards what HTTP threads touch: the pending work below
  std::condition_variable work_;
  std::vector<std::shared_ptr<Job>> pending_;          // submitted, not yet in the Generator
  std::vector<std::shared_ptr<Job>> cancel_requests_;
  int64_t active_ = 0;                                 // admitted jobs not yet done
  int64_t cancelled_ = 0;
  std::atomic<bool> draining_{false};

  std::map<size_t, Admitted> admitted_;  // the loop's own (Generator id → sequence)
};

}  // namespace mt
