// bench/train_throughput: training-step speed and memory of fixed GPT-2-style configs on CPU.
// Prints median ms/iter, tokens/s, TFLOP/s (Megatron's formula), MFU against the sgemm peak
// measured in the same process, and peak RSS. A benchmark, not a test: it never fails on time.
//
//   build/bench/train_throughput [tiny|small|gpt2-124m|all] [--iters N] [--warmup N]
//                                [--recompute-block N]   (full recomputation of the first N layers)
// Each config runs in its own child process so peak RSS is per config.
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "train/flops.h"
#include "train/synthetic_data.h"

namespace {

using Clock = std::chrono::steady_clock;

struct BenchConfig {
  const char* name;
  int64_t layers, hidden, heads, seq, batch;
};

const BenchConfig kConfigs[] = {
    {"tiny", 4, 256, 4, 256, 8},
    {"small", 6, 512, 8, 512, 4},
    {"gpt2-124m", 12, 768, 12, 512, 4},
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Peak sgemm GFLOP/s on this machine now: the best of several runs of the three GEMM shapes a
// transformer layer issues (forward, input gradient, weight gradient) at gpt2-124m's MLP size.
double sgemm_peak_gflops() {
  const int m = 2048, n = 3072, k = 768;
  std::vector<float> a(static_cast<size_t>(m) * n, 0.5f), b(static_cast<size_t>(n) * k, 0.25f),
      c(static_cast<size_t>(m) * n);
  double best = 0.0;
  for (int rep = 0; rep < 4; ++rep) {
    for (int shape = 0; shape < 3; ++shape) {
      const auto t0 = Clock::now();
      if (shape == 0)  // Y[m, n] = X[m, k] · W[n, k]ᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f,
                    c.data(), n);
      else if (shape == 1)  // dX[m, k] = dY[m, n] · W[n, k]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, k, n, 1.0f, c.data(), n, b.data(), k, 0.0f,
                    a.data(), k);
      else  // dW[n, k] = dY[m, n]ᵀ · X[m, k]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, k, m, 1.0f, c.data(), n, a.data(), k, 0.0f,
                    b.data(), k);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep > 0) best = std::max(best, 2.0 * m * n * k / s / 1e9);
    }
  }
  return best;
}

void run_config(const BenchConfig& bc, int warmup, int iters, int64_t recompute_layers) {
  mt::ModelConfig c;
  c.num_layers = bc.layers;
  c.hidden_size = bc.hidden;
  c.num_attention_heads = bc.heads;
  c.seq_length = bc.seq;
  c.vocab_size = 50304;
  c.activation = mt::Activation::gelu_tanh;
  c.untie_embeddings_and_output_weights = true;
  if (recompute_layers > 0) {
    c.recompute_granularity = mt::RecomputeGranularity::full;
    c.recompute_method = mt::RecomputeMethod::block;
    c.recompute_num_layers = std::min(recompute_layers, bc.layers);
  }
  c.finalize();
  mt::MemoryTracker memory;
  mt::GptModel model(c, bc.batch, mt::cpu_backend(), &memory);
  model.params().init(1234);
  mt::AdamW optimizer(model.params().params(), mt::cpu_backend(), &memory);
  const mt::OptimizerConfig oc;
  const mt::SyntheticTokens data(c.vocab_size, c.seq_length, 1234);
  std::vector<int32_t> tokens, labels;
  std::vector<double> ms;
  double fwd_ms = 0, bwd_ms = 0, opt_ms = 0;
  for (int it = 0; it < warmup + iters; ++it) {
    data.batch(it * bc.batch, bc.batch, tokens, labels);
    const mt::TensorView tok(tokens.data(), mt::DType::i32, {bc.batch, bc.seq});
    const mt::TensorView lab(labels.data(), mt::DType::i32, {bc.batch, bc.seq});
    const auto t0 = Clock::now();
    model.params().zero_grads();
    mt::ForwardOptions fo;
    fo.dropout_round = static_cast<uint64_t>(it);
    fo.grad_scale = 1.0f / static_cast<float>(bc.batch * bc.seq);
    model.forward({tok, lab, mt::TensorView()}, fo);
    const auto t1 = Clock::now();
    model.backward();
    const auto t2 = Clock::now();
    optimizer.step(oc, oc.lr, oc.weight_decay);
    const auto t3 = Clock::now();
    if (it >= warmup) {
      ms.push_back(std::chrono::duration<double, std::milli>(t3 - t0).count());
      fwd_ms += std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
      bwd_ms += std::chrono::duration<double, std::milli>(t2 - t1).count() / iters;
      opt_ms += std::chrono::duration<double, std::milli>(t3 - t2).count() / iters;
    }
  }
  const double peak = sgemm_peak_gflops();
  const double med = median(ms);
  const double flops = mt::flops_per_iteration(c, bc.batch);
  const double tflops = flops / (med * 1e-3) / 1e12;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "%-10s params %6.1fM | median %8.1f ms/iter (fwd %.0f, bwd %.0f, optim %.0f) | %7.0f tokens/s | %6.3f TFLOP/s | "
      "MFU %5.1f%% of sgemm %.1f GFLOP/s | peak RSS %.2f GiB | tracked peak %s\n",
      bc.name, static_cast<double>(model.params().numel()) / 1e6, med, fwd_ms, bwd_ms, opt_ms,
      static_cast<double>(bc.batch * bc.seq) / (med * 1e-3), tflops, 100.0 * tflops * 1e3 / peak, peak,
      static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0), mt::format_bytes(memory.peak_total()).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  std::string which = "all";
  int iters = 5, warmup = 2;
  int64_t recompute_layers = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--recompute-block") && i + 1 < argc) recompute_layers = std::atoll(argv[++i]);
    else which = argv[i];
  }
  std::printf("train_throughput: OpenBLAS kernels %s, fp32, %d OpenMP threads, untied GPT-2 style (LayerNorm, GeLU-tanh, learned "
              "positions, biases, dropout 0.1), vocab 50304; %d warm-up + %d measured iterations; full recompute of "
              "the first %lld layers\n",
              openblas_get_corename(), omp_get_max_threads(), warmup, iters, static_cast<long long>(recompute_layers));
  std::fflush(stdout);
  bool found = false;
  for (const BenchConfig& bc : kConfigs) {
    if (which != "all" && which != bc.name) continue;
    found = true;
    const pid_t pid = fork();
    if (pid == 0) {
      run_config(bc, warmup, iters, recompute_layers);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  if (!found) {
    std::fprintf(stderr, "unknown config '%s' (tiny | small | gpt2-124m | all)\n", which.c_str());
    return 2;
  }
  return 0;
}
