// bench/train_throughput: training-step speed and memory of fixed GPT-2-style configs on CPU.
// Prints median ms/iter, tokens/s, TFLOP/s (Megatron's formula), MFU against the sustained sgemm
// rate measured in the same process between the steps, and peak RSS. A benchmark, not a test: it
// never fails on time. Usage: see kUsage below (--help).
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "model/gpt.h"
#include "median.h"
#include "optim/optimizer.h"
#include "plan/flops.h"
#include "train/synthetic_data.h"

namespace {

const char* const kUsage =
    "usage: train_throughput [tiny|small|gpt2-124m|all] [--iters N] [--warmup N] [--recompute-block N]\n"
    "                        [--recompute-mlp] [--peak-seconds S]\n"
    "  --iters N            measured iterations (default 5); the figures are their median\n"
    "  --warmup N           unmeasured iterations first (default 2, at least 1: peak RSS is read after them)\n"
    "  --recompute-block N  full recomputation of the first N layers\n"
    "  --recompute-mlp      selective recomputation of the MLP (fc1 rerun in the backward)\n"
    "  --peak-seconds S     length of each sustained sgemm measurement (default 1): one before the first\n"
    "                       measured step and one after each; every step's MFU is against the mean of the\n"
    "                       two around it, and the printed MFU is the median over the steps\n"
    "Each config runs in its own child process so peak RSS is per config.\n";

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

// The MFU denominator: the sustained multi-threaded sgemm rate of this machine, now. Square
// 2048^3 products, cycling through the three transposition variants a linear layer issues
// (forward Y = X·Wᵀ, input gradient dX = dY·W, weight gradient dW = dYᵀ·X), repeated for at least
// `seconds`: a rate held for a second (as the step's GEMMs must), not the luckiest short burst,
// and from the most GEMM-friendly shape rather than the model's own (which measure a few percent
// lower here), so the model is not credited for the speed of its shapes. Buffers are allocated by
// the caller once, after the training's memory peak was recorded.
struct SgemmPeak {
  static constexpr int kN = 2048;
  std::vector<float> a, b, c;
  SgemmPeak() : a(static_cast<size_t>(kN) * kN), b(static_cast<size_t>(kN) * kN), c(static_cast<size_t>(kN) * kN) {
    // Fixed inputs of both signs (never written), output overwritten: values stay bounded and
    // normal whatever the number of products.
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<float>(static_cast<int>(i * 2654435761u % 17) - 8) / 8.0f;
      b[i] = static_cast<float>(static_cast<int>(i * 40503u % 13) - 6) / 6.0f;
    }
    gemm(0);  // page in, start the threads
  }
  void gemm(int variant) {
    const int n = kN;
    const CBLAS_TRANSPOSE ta = variant == 2 ? CblasTrans : CblasNoTrans, tb = variant == 0 ? CblasTrans : CblasNoTrans;
    cblas_sgemm(CblasRowMajor, ta, tb, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  }
  double gflops(double seconds) {
    const auto t0 = Clock::now();
    double flops = 0.0, elapsed = 0.0;
    for (int variant = 0; elapsed < seconds; variant = (variant + 1) % 3) {
      gemm(variant);
      flops += 2.0 * kN * kN * kN;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return flops / elapsed / 1e9;
  }
};

struct Recompute {
  int64_t block_layers = 0;  // --recompute-granularity full --recompute-method block --recompute-num-layers N
  bool mlp = false;          // --recompute-granularity selective --recompute-modules mlp
};

void run_config(const BenchConfig& bc, int warmup, int iters, const Recompute& recompute, double peak_seconds) {
  mt::ModelConfig c;
  c.num_layers = bc.layers;
  c.hidden_size = bc.hidden;
  c.num_attention_heads = bc.heads;
  c.seq_length = bc.seq;
  c.vocab_size = 50304;
  c.activation = mt::Activation::gelu_tanh;
  c.untie_embeddings_and_output_weights = true;
  if (recompute.block_layers > 0) {
    c.recompute_granularity = mt::RecomputeGranularity::full;
    c.recompute_method = mt::RecomputeMethod::block;
    c.recompute_num_layers = std::min(recompute.block_layers, bc.layers);
  } else if (recompute.mlp) {
    c.recompute_granularity = mt::RecomputeGranularity::selective;
    c.recompute_mlp = true;
  }
  c.finalize();
  mt::MemoryTracker memory;
  mt::GptModel model(c, bc.batch, mt::cpu_backend(), &memory);
  model.params().init(1234);
  mt::Optimizer optimizer(model.params().params(), mt::cpu_backend(), &memory);
  const mt::OptimizerConfig oc;
  const mt::SyntheticTokens data(c.vocab_size, c.seq_length, 1234);
  std::vector<int32_t> tokens, labels;
  std::vector<double> ms, step_mfu, peaks;
  std::unique_ptr<SgemmPeak> peak;
  double peak_rss_gib = 0.0, fwd_ms = 0, bwd_ms = 0, opt_ms = 0;
  const double flops = mt::flops_per_iteration(c, bc.batch);
  for (int it = 0; it < warmup + iters; ++it) {
    if (it == warmup) {
      // Training memory has peaked (the step allocates nothing after the first); record it before
      // the sgemm buffers exist, then take the first peak sample.
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      peak_rss_gib = static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);
      peak = std::make_unique<SgemmPeak>();
      peaks.push_back(peak->gflops(peak_seconds));
    }
    data.batch(it * bc.batch, bc.batch, tokens, labels);
    const mt::TensorView tok(tokens.data(), mt::DType::i32, {bc.batch, bc.seq});
    const mt::TensorView lab(labels.data(), mt::DType::i32, {bc.batch, bc.seq});
    const auto t0 = Clock::now();
    model.params().zero_grads();
    mt::ForwardOptions fo;
    fo.first_sample = static_cast<uint64_t>(it * bc.batch);
    fo.grad_scale = 1.0f / static_cast<float>(bc.batch * bc.seq);
    model.forward({tok, lab, mt::TensorView()}, fo);
    const auto t1 = Clock::now();
    model.backward();
    const auto t2 = Clock::now();
    optimizer.step(oc, oc.lr, oc.weight_decay);
    const auto t3 = Clock::now();
    if (it >= warmup) {
      const double step_ms = std::chrono::duration<double, std::milli>(t3 - t0).count();
      ms.push_back(step_ms);
      fwd_ms += std::chrono::duration<double, std::milli>(t1 - t0).count() / iters;
      bwd_ms += std::chrono::duration<double, std::milli>(t2 - t1).count() / iters;
      opt_ms += std::chrono::duration<double, std::milli>(t3 - t2).count() / iters;
      // Each step against the peak measured right before and right after it: drift of the
      // machine over the run falls on both sides of the ratio.
      peaks.push_back(peak->gflops(peak_seconds));
      const double local_peak = 0.5 * (peaks[peaks.size() - 2] + peaks.back());
      step_mfu.push_back(flops / (step_ms * 1e-3) / 1e9 / local_peak);
    }
  }
  const double med = median(ms), med_peak = median(peaks);
  const double tflops = flops / (med * 1e-3) / 1e12;
  std::printf(
      "%-10s params %6.1fM | median %8.1f ms/iter (fwd %.0f, bwd %.0f, optim %.0f) | %7.0f tokens/s | %6.3f TFLOP/s | "
      "MFU %5.1f%% (steps %.1f-%.1f%%) of sustained sgemm %.1f GFLOP/s (%.1f-%.1f) | peak RSS %.2f GiB | tracked peak %s\n",
      bc.name, static_cast<double>(model.params().numel()) / 1e6, med, fwd_ms, bwd_ms, opt_ms,
      static_cast<double>(bc.batch * bc.seq) / (med * 1e-3), tflops, 100.0 * median(step_mfu),
      100.0 * *std::min_element(step_mfu.begin(), step_mfu.end()), 100.0 * *std::max_element(step_mfu.begin(), step_mfu.end()),
      med_peak, *std::min_element(peaks.begin(), peaks.end()), *std::max_element(peaks.begin(), peaks.end()), peak_rss_gib,
      mt::format_bytes(memory.peak_total()).c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  std::string which = "all";
  int iters = 5, warmup = 2;
  Recompute recompute;
  double peak_seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--recompute-block") && i + 1 < argc) recompute.block_layers = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--recompute-mlp")) recompute.mlp = true;
    else if (!std::strcmp(argv[i], "--peak-seconds") && i + 1 < argc) peak_seconds = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s", kUsage);
      return 0;
    }
    else which = argv[i];
  }
  warmup = std::max(warmup, 1);
  iters = std::max(iters, 1);
  if (recompute.block_layers > 0 && recompute.mlp) {
    std::fprintf(stderr, "--recompute-block and --recompute-mlp exclude each other (full vs selective)\n");
    return 2;
  }
  std::printf("train_throughput: OpenBLAS kernels %s, fp32, %d OpenMP threads, untied GPT-2 style (LayerNorm, GeLU-tanh, learned "
              "positions, biases, dropout 0.1), vocab 50304; %d warm-up + %d measured iterations; full recompute of "
              "the first %lld layers%s; OMP_WAIT_POLICY=%s; sgemm peak: 2048^3, %.1f s sustained per sample\n",
              openblas_get_corename(), omp_get_max_threads(), warmup, iters, static_cast<long long>(recompute.block_layers),
              recompute.mlp ? ", MLP recomputed" : "",
              std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "(unset)", peak_seconds);
  std::fflush(stdout);
  bool found = false;
  for (const BenchConfig& bc : kConfigs) {
    if (which != "all" && which != bc.name) continue;
    found = true;
    const pid_t pid = fork();
    if (pid == 0) {
      run_config(bc, warmup, iters, recompute, peak_seconds);
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
