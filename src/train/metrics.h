// Owns what the training loop reports, formatted as Megatron-LM's training.py prints it: the
// per-iteration record, the interval bookkeeping of training_log (advanced / skipped / nan
// iterations, the lm loss averaged over the log interval), the log line, the validation block of
// evaluate_and_print_results, print_datetime's line, and a progress estimate for terminals.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mt {

// What one training iteration did.
// The MoE figures of one iteration (train/moe_metrics.h computes them).
struct MoeIterationMetrics {
  std::vector<std::pair<std::string, double>> losses;  // e.g. {"load_balancing_loss", 1.02}; empty when dense
  // Rows per expert and MoE layer over the global batch (padding included).
  double tokens_min = 0.0, tokens_mean = 0.0, tokens_max = 0.0;
  double dropped_fraction = 0.0;  // dropped / routed token-expert choices
  std::vector<double> tokens_per_expert;  // [num_layers][E]: each layer's global counts (dense layers 0)
};

struct IterationStats {
  int64_t iteration = 0;         // 1-based
  int64_t consumed_samples = 0;  // global samples consumed after this iteration
  int64_t global_batch_size = 0;  // samples it read (the batch schedule's step)
  double loss = 0.0;             // lm loss: Σ mask·token loss / Σ mask over the global batch
  double num_tokens = 0.0;       // Σ mask over the global batch
  double grad_norm = 0.0;        // global L2 norm before clipping
  std::optional<double> params_norm;  // --log-params-norm: the parameters' L2 norm after the update
  float lr = 0.0f;               // learning rate this iteration's update used: lr(samples consumed before it)
  float weight_decay = 0.0f;     // weight decay it used
  float logged_lr = 0.0f;        // the scheduler's lr after this iteration (what Megatron logs)
  bool skipped = false;          // update skipped (fp16 overflow); the schedule did not advance
  float loss_scale = 1.0f;       // the loss scale after this iteration's update (as logged)
  double elapsed_ms = 0.0;       // wall time of this iteration's train step alone
  // Bytes this rank sent in the step over the tensor-parallel, pipeline (point-to-point messages
  // and the tied embedding's all-reduce) and data-parallel groups (an MoE model's expert-dp
  // included), as ring algorithms send them (CommTotals::sent_bytes).
  double tp_bytes_sent = 0.0, pp_bytes_sent = 0.0, dp_bytes_sent = 0.0;
  double ep_bytes_sent = 0.0;   // MoE: the token dispatchers' (over ep, etp and etp × ep)
  double cp_bytes_sent = 0.0;   // context parallelism's attention (over cp)
  MoeIterationMetrics moe;      // MoE models only
};

// The values of one log line.
struct LogLine {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  double elapsed_ms_per_iteration = 0.0;  // interval time / iterations in the interval
  double tflops_per_gpu = 0.0;            // Megatron's FLOPs formula / time / world size
  double tokens_per_second = 0.0;         // global batch × seq length / time per iteration
  float learning_rate = 0.0f;
  int64_t global_batch_size = 0;
  std::optional<double> lm_loss;          // absent when the interval had no advanced iteration
  std::vector<std::pair<std::string, double>> moe_losses;  // after the lm loss, as Megatron's total_loss_dict
  float loss_scale = 1.0f;
  std::optional<double> grad_norm;
  std::optional<double> params_norm;      // --log-params-norm
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;
};

// " [timestamp] iteration N/T | consumed samples: ... | number of nan iterations: K |", with
// Megatron's field order and number formats. Two deviations: the throughput has three decimals
// (Megatron's one would print 0.0 on a CPU) and "tokens per second" follows it (Megatron reports
// that figure only to its telemetry).
std::string format_log_line(const LogLine& line, const std::string& timestamp);

// datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f'), in local time.
std::string timestamp_now();

// print_datetime: "[<what>] datetime: <timestamp> ".
std::string format_datetime_line(const std::string& what);

// evaluate_and_print_results: the line " validation loss at <prefix> | lm loss value: X |
// lm loss PPL: Y | " framed above and below by dashes of its length + 1 (three lines, joined by
// newlines). PPL = exp(min(20, loss)).
std::string format_validation_block(const std::string& prefix, double lm_loss);

// " communication per iteration on this rank (ring-algorithm bytes sent): tp 1.23 MB | pp 0 B |
// dp 45.6 MB |" (decimal units: B, kB, MB, GB). Megatron does not print it; its users ask where
// their time goes.
// An MoE model adds " ep ... |": the token dispatchers' exchanges over ep, etp and etp × ep;
// context parallelism " cp ... |": attention's keys and values.
std::string format_comm_line(double tp_bytes, double pp_bytes, double dp_bytes,
                             std::optional<double> ep_bytes = std::nullopt,
                             std::optional<double> cp_bytes = std::nullopt);

// "[progress] iteration i/N (p%) | elapsed h:mm:ss | remaining ~h:mm:ss", extrapolating the
// average wall time per iteration so far.
std::string format_progress(int64_t iteration, int64_t total, double elapsed_seconds);

// training_log's total_loss_dict: counts advanced, skipped and nan iterations since the last
// printed line and sums the lm loss of the advanced ones. A skipped iteration whose loss is not
// finite counts as a nan iteration (only skipped iterations can be: an update with a NaN/Inf
// loss or gradient is fatal, as with Megatron's default --check-for-nan-in-loss-and-grad).
class IntervalAccumulator {
 public:
  void add(const IterationStats& stats);
  int64_t iterations() const { return advanced_ + skipped_; }
  int64_t skipped() const { return skipped_; }
  int64_t nan() const { return nan_; }
  // Σ loss / advanced iterations; absent when none advanced or the mean is not >= 0 (Megatron
  // prints the loss only when `avg >= 0.0`).
  std::optional<double> mean_loss() const;
  // Mean bytes sent per iteration (skipped ones included) over tp, pp and dp.
  double mean_tp_bytes() const { return per_iteration(tp_bytes_); }
  double mean_pp_bytes() const { return per_iteration(pp_bytes_); }
  double mean_dp_bytes() const { return per_iteration(dp_bytes_); }
  double mean_ep_bytes() const { return per_iteration(ep_bytes_); }
  double mean_cp_bytes() const { return per_iteration(cp_bytes_); }
  // The MoE losses' means over the advanced iterations.
  std::vector<std::pair<std::string, double>> mean_moe_losses() const;
  void reset() { *this = IntervalAccumulator(); }

 private:
  int64_t advanced_ = 0, skipped_ = 0, nan_ = 0;
  double loss_sum_ = 0.0;
  std::vector<std::pair<std::string, double>> moe_loss_sums_;
  double tp_bytes_ = 0.0, pp_bytes_ = 0.0, dp_bytes_ = 0.0, ep_bytes_ = 0.0, cp_bytes_ = 0.0;
  double per_iteration(double total) const { return total / std::max<double>(1.0, static_cast<double>(iterations())); }
};

}  // namespace mt
