// Owns BatchSchedule (see batch_schedule.h).
#include "train/batch_schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/error.h"

namespace mt {

namespace {

constexpr const char* kFlag = "--step-batch-size-schedule";

// Megatron's _parse_numeric_value: int(float(text) * multiplier), suffix K/M/B/T.
int64_t parse_number(std::string text, const std::string& entry) {
  for (char& ch : text) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double multiplier = 1.0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'T': multiplier = 1e12; break;
      case 'B': multiplier = 1e9; break;
      case 'M': multiplier = 1e6; break;
      case 'K': multiplier = 1e3; break;
      default: break;
    }
    if (multiplier != 1.0) text.pop_back();
  }
  char* end = nullptr;
  const double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  const double scaled = std::trunc(value * multiplier);
  MT_CHECK(end != nullptr && *end == '\0' && std::isfinite(scaled) && std::abs(scaled) < 9e18)
      << kFlag << ": \"" << entry << "\" is not THRESHOLD:BATCH_SIZE with numbers such as 0, 1024, 2.4B or 500M";
  return static_cast<int64_t>(scaled);
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

}  // namespace

BatchSchedule BatchSchedule::constant(int64_t batch_size) {
  BatchSchedule s;
  s.steps_.push_back({0, batch_size});
  return s;
}

BatchSchedule BatchSchedule::parse(const std::string& text, int64_t seq_length) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  BatchSchedule s;
  size_t at = 0;
  while (true) {
    at = spaced.find_first_not_of(" \t\n", at);
    if (at == std::string::npos) break;
    const size_t end = std::min(spaced.find_first_of(" \t\n", at), spaced.size());
    const std::string entry = spaced.substr(at, end - at);
    at = end;
    const size_t colon = entry.find(':');
    MT_CHECK(colon != std::string::npos)
        << kFlag << ": entry \"" << entry << "\" has no ':'; write THRESHOLD:BATCH_SIZE, e.g. \"0:384 200B:768\"";
    int64_t threshold = parse_number(entry.substr(0, colon), entry);
    const int64_t batch = parse_number(entry.substr(colon + 1), entry);
    if (seq_length > 0) threshold = floor_div(threshold, seq_length);
    MT_CHECK(batch > 0) << kFlag << ": entry \"" << entry << "\" has batch size " << batch << "; batch sizes must be > 0";
    s.steps_.push_back({threshold, batch});
  }
  MT_CHECK(!s.steps_.empty()) << kFlag << " \"" << text << "\" has no entry; write THRESHOLD:BATCH_SIZE pairs, e.g. \"0:384 200B:768\"";
  std::stable_sort(s.steps_.begin(), s.steps_.end(),
                   [](const BatchStep& a, const BatchStep& b) { return a.from_sample < b.from_sample; });
  const char* unit = seq_length > 0 ? " samples (thresholds are tokens // --seq-length)" : " samples";
  MT_CHECK(s.steps_.front().from_sample == 0)
      << kFlag << ": the first threshold must be 0 (got " << s.steps_.front().from_sample << unit << ")";
  for (size_t i = 1; i < s.steps_.size(); ++i) {
    const BatchStep &before = s.steps_[i - 1], &step = s.steps_[i];
    MT_CHECK(step.from_sample > before.from_sample)
        << kFlag << ": thresholds must be strictly increasing; two of them are " << before.from_sample << unit;
    MT_CHECK(step.batch_size >= before.batch_size)
        << kFlag << ": the batch size shrinks from " << before.batch_size << " to " << step.batch_size << " at "
        << step.from_sample << unit << "; Megatron-LM stops when the number of micro-batches decreases";
  }
  return s;
}

int64_t BatchSchedule::batch_at(int64_t consumed) const {
  MT_CHECK(!steps_.empty()) << "no batch size schedule";
  int64_t batch = steps_.front().batch_size;
  for (const BatchStep& step : steps_)
    if (consumed >= step.from_sample) batch = step.batch_size;
  return batch;
}

int64_t BatchSchedule::next_threshold(int64_t consumed) const {
  for (const BatchStep& step : steps_)
    if (step.from_sample > consumed) return step.from_sample;
  return std::numeric_limits<int64_t>::max();
}

int64_t BatchSchedule::iterations_for_samples(int64_t samples) const {
  // The simulation loop of update_train_iters, one run of equal batches at a time.
  int64_t iterations = 0, consumed = 0;
  while (consumed < samples) {
    const int64_t batch = batch_at(consumed);
    const int64_t until = std::min(next_threshold(consumed), samples);
    const int64_t n = (until - consumed + batch - 1) / batch;
    iterations += n;
    consumed += n * batch;
  }
  return iterations;
}

std::vector<BatchRun> BatchSchedule::runs(int64_t consumed, int64_t iterations) const {
  std::vector<BatchRun> out;
  while (iterations > 0) {
    const int64_t batch = batch_at(consumed);
    const int64_t next = next_threshold(consumed);
    const int64_t to_next = next == std::numeric_limits<int64_t>::max() ? iterations
                                                                         : (next - consumed + batch - 1) / batch;
    const int64_t n = std::min(iterations, to_next);
    if (!out.empty() && out.back().batch_size == batch)
      out.back().iterations += n;  // equal neighbouring steps
    else
      out.push_back({consumed, batch, n});
    consumed += n * batch;
    iterations -= n;
  }
  return out;
}

std::string BatchSchedule::describe() const {
  std::string s;
  for (const BatchStep& step : steps_)
    s += (s.empty() ? "" : " ") + std::to_string(step.from_sample) + ":" + std::to_string(step.batch_size);
  return s;
}

}  // namespace mt
