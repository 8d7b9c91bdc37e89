#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "train/flops.h"
#include "train/synthetic_data.h"

namespace mt {

Trainer::Trainer(const ModelConfig& model, const TrainConfig& train) : model_config_(model), config_(train) {
  model_config_.finalize();
  if (config_.global_batch_size == 0) config_.global_batch_size = config_.micro_batch_size;
  MT_CHECK(config_.micro_batch_size > 0) << "--micro-batch-size must be positive";
  MT_CHECK(config_.global_batch_size % config_.micro_batch_size == 0)
      << "--global-batch-size " << config_.global_batch_size << " is not a multiple of --micro-batch-size "
      << config_.micro_batch_size << " x data-parallel size 1";
  MT_CHECK(config_.train_iters > 0) << "--train-iters must be positive";
  MT_CHECK(config_.log_interval > 0) << "--log-interval must be positive";
  model_ = std::make_unique<GptModel>(model_config_, config_.micro_batch_size, cpu_backend(), &memory_);
  model_->set_seed(config_.seed);
  model_->params().init(config_.seed);
  optimizer_ = std::make_unique<AdamW>(model_->params().params(), cpu_backend(), &memory_);
}

std::vector<IterationStats> Trainer::run(const std::function<void(const std::string&)>& log) {
  const int64_t b = config_.micro_batch_size, s = model_config_.seq_length;
  const int64_t accumulation = config_.global_batch_size / b;
  const SyntheticTokens data(model_config_.vocab_size, s, config_.seed);
  const double flops = flops_per_iteration(model_config_, config_.global_batch_size);
  std::vector<int32_t> tokens, labels;
  std::vector<IterationStats> history;
  int64_t consumed = 0;
  for (int64_t it = 1; it <= config_.train_iters; ++it) {
    const auto start = std::chrono::steady_clock::now();
    model_->params().zero_grads();
    double loss = 0.0;
    for (int64_t mb = 0; mb < accumulation; ++mb) {
      data.batch(consumed, b, tokens, labels);
      const TensorView tok(tokens.data(), DType::i32, {b, s}), lab(labels.data(), DType::i32, {b, s});
      // Megatron's reduction: each micro-batch's loss is its mean over tokens, and the
      // micro-batch losses are averaged.
      const double tokens_in_batch = static_cast<double>(b * s);
      ForwardOptions fo;
      fo.dropout_round = static_cast<uint64_t>(consumed);
      fo.grad_scale = static_cast<float>(1.0 / (tokens_in_batch * static_cast<double>(accumulation)));
      const LossSums sums = model_->forward({tok, lab, TensorView()}, fo);
      loss += sums.loss_sum / sums.num_tokens / static_cast<double>(accumulation);
      model_->backward();
      consumed += b;
    }
    const auto step = optimizer_->step(config_.optimizer, config_.optimizer.lr, config_.optimizer.weight_decay);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    IterationStats stats;
    stats.iteration = it;
    stats.loss = loss;
    stats.grad_norm = step.grad_norm;
    stats.elapsed_ms = ms;
    stats.tflops = flops / (ms * 1e-3) / 1e12;
    stats.tokens_per_s = static_cast<double>(config_.global_batch_size * s) / (ms * 1e-3);
    history.push_back(stats);
    if (it % config_.log_interval == 0) log(format_log_line(stats, config_, config_.optimizer.lr));
    if (it == 1) log("[after iteration 1] memory (peak bytes by category): " + memory_.report());
  }
  return history;
}

std::string format_log_line(const IterationStats& st, const TrainConfig& c, float lr) {
  char time_buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(time_buf, sizeof time_buf, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  char line[512];
  std::snprintf(line, sizeof line,
                " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
                "throughput per GPU (TFLOP/s/GPU): %.3f | tokens per second: %.0f | learning rate: %.6E | "
                "global batch size: %5lld | lm loss: %.6E | loss scale: 1.0 | grad norm: %.3f | "
                "number of skipped iterations: %3d | number of nan iterations: %3d |",
                time_buf, static_cast<long long>(st.iteration), static_cast<long long>(c.train_iters),
                static_cast<long long>(st.iteration * c.global_batch_size), st.elapsed_ms, st.tflops,
                st.tokens_per_s, static_cast<double>(lr), static_cast<long long>(c.global_batch_size), st.loss,
                st.grad_norm, 0, std::isfinite(st.loss) ? 0 : 1);
  return line;
}

}  // namespace mt
