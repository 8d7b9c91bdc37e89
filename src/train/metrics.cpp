// Owns the formatting of Megatron's training output and the log-interval bookkeeping (see metrics.h).
#include "train/metrics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace mt {

namespace {
std::string printf_string(const char* format, auto... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  std::string out(static_cast<size_t>(n), '\0');
  std::snprintf(out.data(), out.size() + 1, format, args...);
  return out;
}

std::string hms(double seconds) {
  const long long s = static_cast<long long>(std::llround(std::max(seconds, 0.0)));
  return printf_string("%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}
}  // namespace

std::string format_log_line(const LogLine& l, const std::string& timestamp) {
  std::string s = " [" + timestamp + "]";
  s += printf_string(" iteration %8lld/%8lld |", static_cast<long long>(l.iteration),
                     static_cast<long long>(l.train_iters));
  s += printf_string(" consumed samples: %12lld |", static_cast<long long>(l.consumed_samples));
  s += printf_string(" elapsed time per iteration (ms): %.1f |", l.elapsed_ms_per_iteration);
  s += printf_string(" throughput per GPU (TFLOP/s/GPU): %.3f |", l.tflops_per_gpu);
  s += printf_string(" tokens per second: %.0f |", l.tokens_per_second);
  s += printf_string(" learning rate: %.6E |", static_cast<double>(l.learning_rate));
  s += printf_string(" global batch size: %5lld |", static_cast<long long>(l.global_batch_size));
  if (l.lm_loss) s += printf_string(" lm loss: %.6E |", *l.lm_loss);
  for (const auto& [name, value] : l.moe_losses) s += printf_string(" %s: %.6E |", name.c_str(), value);
  s += printf_string(" loss scale: %.1f |", static_cast<double>(l.loss_scale));
  if (l.grad_norm) s += printf_string(" grad norm: %.3f |", *l.grad_norm);
  if (l.params_norm) s += printf_string(" params norm: %.3f |", *l.params_norm);
  s += printf_string(" number of skipped iterations: %3lld |", static_cast<long long>(l.skipped_iterations));
  s += printf_string(" number of nan iterations: %3lld |", static_cast<long long>(l.nan_iterations));
  return s;
}

std::string timestamp_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm local{};
  localtime_r(&t, &local);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return printf_string("%s.%06lld", buf, static_cast<long long>(micros));
}

std::string format_datetime_line(const std::string& what) { return "[" + what + "] datetime: " + timestamp_now() + " "; }

std::string format_validation_block(const std::string& prefix, double lm_loss) {
  std::string line = " validation loss at " + prefix + " | ";
  line += printf_string("lm loss value: %.6E | ", lm_loss);
  line += printf_string("lm loss PPL: %.6E | ", std::exp(std::min(20.0, lm_loss)));
  const std::string rule(line.size() + 1, '-');
  return rule + "\n" + line + "\n" + rule;
}

std::string format_progress(int64_t iteration, int64_t total, double elapsed_seconds) {
  const double done = static_cast<double>(iteration), all = static_cast<double>(std::max<int64_t>(total, 1));
  const double remaining = iteration > 0 ? elapsed_seconds / done * (all - done) : 0.0;
  return printf_string("[progress] iteration %lld/%lld (%.1f%%) | elapsed %s | remaining ~%s",
                       static_cast<long long>(iteration), static_cast<long long>(total), 100.0 * done / all,
                       hms(elapsed_seconds).c_str(), hms(remaining).c_str());
}

std::string format_comm_line(double tp_bytes, double pp_bytes, double dp_bytes, std::optional<double> ep_bytes,
                             std::optional<double> cp_bytes) {
  auto size = [](double bytes) {
    const char* units[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (bytes >= 1000.0 && u < 4) bytes /= 1000.0, ++u;
    return printf_string(u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  };
  return " communication per iteration on this rank (ring-algorithm bytes sent): tp " + size(tp_bytes) + " | pp " +
         size(pp_bytes) + " | dp " + size(dp_bytes) + " |" + (ep_bytes ? " ep " + size(*ep_bytes) + " |" : "") +
         (cp_bytes ? " cp " + size(*cp_bytes) + " |" : "");
}

void IntervalAccumulator::add(const IterationStats& st) {
  tp_bytes_ += st.tp_bytes_sent;
  ep_bytes_ += st.ep_bytes_sent;
  cp_bytes_ += st.cp_bytes_sent;
  pp_bytes_ += st.pp_bytes_sent;
  dp_bytes_ += st.dp_bytes_sent;
  if (!st.skipped) {
    ++advanced_;
    loss_sum_ += st.loss;
    if (moe_loss_sums_.empty()) moe_loss_sums_ = st.moe.losses;
    else
      for (size_t i = 0; i < moe_loss_sums_.size(); ++i) moe_loss_sums_[i].second += st.moe.losses[i].second;
  } else {
    ++skipped_;
    if (!std::isfinite(st.loss)) ++nan_;
  }
}

std::vector<std::pair<std::string, double>> IntervalAccumulator::mean_moe_losses() const {
  std::vector<std::pair<std::string, double>> means = moe_loss_sums_;
  for (auto& [name, value] : means) value /= static_cast<double>(std::max<int64_t>(advanced_, 1));
  return means;
}

std::optional<double> IntervalAccumulator::mean_loss() const {
  if (advanced_ == 0) return std::nullopt;
  const double mean = loss_sum_ / static_cast<double>(advanced_);
  if (!(mean >= 0.0)) return std::nullopt;
  return mean;
}

}  // namespace mt
