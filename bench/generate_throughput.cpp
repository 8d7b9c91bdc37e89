// bench/generate_throughput: decode speed of the inference engine on GPT-2 124M (fp32, random weights: speed
// does not depend on them), at each batch size given, against the memory-bandwidth limit of this
// machine. A decode step reads every weight once whatever the batch, so at batch 1 the step can be
// no faster than (bytes of weights) / (read bandwidth); the bandwidth is measured here, in the same
// run, by summing a 1 GiB array with the same threads.
//
//   build/bench/generate_throughput [--batch 1,16] [--prompt 32] [--tokens 32] [--repeats 3]
//
// Prints one line per batch size: decode tokens/s (median over repeats of prefill + `tokens`
// greedy decode steps, timing the decode steps only), ms per step, and the ratio to the bandwidth
// limit. A benchmark: it never fails on time. bench/compare_generate.sh sets it beside PyTorch.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "infer/engine.h"
#include "median.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// GB/s reading a 1 GiB f32 array with every OpenMP thread (the best of 5 passes).
double read_bandwidth() {
  std::vector<float> data(size_t{1} << 28, 1.0f);
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto start = Clock::now();
    float sum = 0.0f;  // vectorised (f32 lanes), so the loop is bound by memory, not by adds
#pragma omp parallel for simd reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < data.size(); ++i) sum += data[i];
    const double s = seconds_since(start);
    if (sum <= 0.0f) std::abort();  // keeps the loop
    best = std::max(best, data.size() * sizeof(float) / s / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {1, 16};
  int64_t prompt = 32, tokens = 32, repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--batch") {
      batches.clear();
      std::stringstream list(value);
      for (std::string b; std::getline(list, b, ',');) batches.push_back(std::stoll(b));
    } else if (flag == "--prompt") {
      prompt = std::stoll(value);
    } else if (flag == "--tokens") {
      tokens = std::stoll(value);
    } else if (flag == "--repeats") {
      repeats = std::stoll(value);
    } else {
      std::fprintf(stderr, "usage: generate_throughput [--batch 1,16] [--prompt 32] [--tokens 32] [--repeats 3]\n");
      return 2;
    }
  }
  mt::ModelConfig c;  // GPT-2 124M
  c.num_layers = 12;
  c.hidden_size = 768;
  c.num_attention_heads = 12;
  c.seq_length = 1024;
  c.vocab_size = 50257;
  c.activation = mt::Activation::gelu_tanh;
  c.finalize();
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  mt::EngineOptions o;
  o.slots = max_batch;
  o.max_sequence_length = prompt + tokens;
  o.max_step_tokens = max_batch * prompt;
  mt::InferenceEngine engine(c, mt::cpu_backend(), nullptr, o);
  engine.params().init(1);
  const double weight_bytes = static_cast<double>(engine.params().numel()) * sizeof(float);
  const double bandwidth = read_bandwidth();
  const double limit = bandwidth * 1e9 / weight_bytes;  // steps per second if only the weights were read
  std::printf("gpt2-124m fp32, %d threads: weights %.0f MB, read bandwidth %.1f GB/s -> at most %.1f decode steps/s\n",
              omp_get_max_threads(), weight_bytes / 1e6, bandwidth, limit);

  std::vector<int32_t> prompts(static_cast<size_t>(max_batch * prompt));
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = static_cast<int32_t>((i * 7919) % 50257);
  for (const int64_t batch : batches) {
    std::vector<double> rates;
    for (int64_t r = 0; r < repeats; ++r) {
      std::vector<mt::SequenceChunk> step;
      for (int64_t b = 0; b < batch; ++b) step.push_back({b, 0, prompts.data() + b * prompt, prompt, false});
      mt::TensorView logits = engine.step(step);
      std::vector<int32_t> next(static_cast<size_t>(batch));
      const auto start = Clock::now();
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t b = 0; b < batch; ++b) {
          const float* row = logits.f32() + b * logits.dim(1);
          next[b] = static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row);
          step[b] = {b, prompt + t, &next[b], 1, false};
        }
        logits = engine.step(step);
      }
      rates.push_back(static_cast<double>(batch * tokens) / seconds_since(start));
    }
    const double rate = median(rates);
    std::printf("batch %lld: decode %.1f tokens/s, %.1f ms per step; %.2fx the bandwidth limit's steps/s\n",
                static_cast<long long>(batch), rate, 1e3 * batch / rate, rate / batch / limit);
  }
  return 0;
}
