// bench/moe: tokens/s of a whole MoE GPT against the dense GPT of the same active FLOPs, and of
// the grouped expert kernel (--moe-grouped-gemm, Megatron's GroupedMLP) against the per-expert
// loop (SequentialMLP), as full train steps through the Trainer on one rank (mock data):
//   dense         SwiGLU MLP of width F
//   moe loop      E = 8 experts, top-2, expert width F/2, sequential experts
//   moe grouped   the same, experts_impl = grouped
//   moe grouped cf1.25   the same with --moe-expert-capacity-factor 1.25 (tokens over it dropped)
// Every model: L = 4, h = 512, 8 heads, s = 512, micro-batch = global batch = 2, V = 1024, bf16,
// dropout 0.1, no biases (--disable-bias-linear: the experts have none, so neither has the dense
// model). Two experts of width F/2 per token give the dense model's MLP FLOPs; Megatron's formula
// (plan/flops.h, which leaves out the router's GEMM) is printed for both to show it. The router is
// untrained (no aux loss), so the expert loads are whatever its random init gives: the largest
// expert's rows against the mean are printed beside the times, with the capacity variant's drops.
// Configurations run round-robin, a fresh Trainer each round, so drift on a shared machine falls
// on all alike; per configuration the median over rounds of each round's median step time, the
// ratios from those medians. The FLOPs count every routed choice, so the capacity variant's
// GFLOP/s overstates the work it did by its dropped share. A benchmark: it never fails on time.
//   build/bench/moe [--rounds R] [--steps N] [--only dense|loop|grouped|cf1.25]
// (--only: one configuration alone, e.g. under perf; no ratios then.)
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "median.h"
#include "plan/flops.h"
#include "train/trainer.h"

namespace {

constexpr int64_t kLayers = 4, kHidden = 512, kHeads = 8, kSeq = 512, kBatch = 2, kVocab = 1024;
constexpr int64_t kFfn = 2048;  // the dense model's MLP width F (4h)
constexpr int64_t kExperts = 8, kTopk = 2;

struct Setting {
  const char* name;
  const char* key;  // for --only
  bool moe;
  mt::MoeExpertsImpl impl;
  std::optional<double> capacity_factor;
};

const Setting kSettings[] = {
    {"dense", "dense", false, mt::MoeExpertsImpl::sequential, std::nullopt},
    {"moe loop", "loop", true, mt::MoeExpertsImpl::sequential, std::nullopt},
    {"moe grouped", "grouped", true, mt::MoeExpertsImpl::grouped, std::nullopt},
    {"moe grouped cf1.25", "cf1.25", true, mt::MoeExpertsImpl::grouped, 1.25},
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

mt::ModelConfig model(const Setting& setting) {
  mt::ModelConfig m;
  m.num_layers = kLayers;
  m.hidden_size = kHidden;
  m.num_attention_heads = kHeads;
  m.seq_length = kSeq;
  m.vocab_size = kVocab;  // a small output layer: the layers' time dominates
  m.ffn_hidden_size = kFfn;
  m.activation = mt::Activation::swiglu;
  m.add_bias_linear = false;
  m.params_dtype = mt::DType::bf16;
  if (setting.moe) {
    m.moe.num_experts = kExperts;
    m.moe.router.topk = kTopk;
    m.moe.ffn_hidden_size = kFfn / kTopk;  // k experts of F/k: the dense model's active width
    m.moe.experts_impl = setting.impl;
    m.moe.capacity.capacity_factor = setting.capacity_factor;
  }
  return m;
}

mt::TrainConfig run(int steps) {
  mt::TrainConfig t;
  t.micro_batch_size = kBatch;
  t.global_batch_size = kBatch;
  t.train_iters = steps;
  t.eval_iters = 0;
  t.log_interval = 1000;
  t.schedule.lr = 1e-4;
  t.loss_scale.bf16 = true;
  return t;
}

struct Measured {
  double flops = 0.0;        // Megatron's formula, per iteration
  std::vector<double> ms;    // each round's median step time
  std::vector<double> load;  // each round's largest expert rows / mean (last timed step)
  std::vector<double> dropped;
};

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  int rounds = 3, steps = 3;
  const char* only = nullptr;  // one configuration alone (for a profiler); no ratios then
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: moe [--rounds R] [--steps N] [--only dense|loop|grouped|cf1.25]\n");
      return 2;
    }
  }
  auto selected = [&](size_t k) { return !only || !std::strcmp(only, kSettings[k].key); };
  if (only && std::none_of(std::begin(kSettings), std::end(kSettings),
                           [&](const Setting& s) { return !std::strcmp(only, s.key); })) {
    std::fprintf(stderr, "moe: --only takes dense, loop, grouped or cf1.25, not '%s'\n", only);
    return 2;
  }
  const double tokens = static_cast<double>(kBatch * kSeq);
  std::printf("moe: L=%lld h=%lld heads=%lld s=%lld b=%lld V=%lld, SwiGLU, no biases, bf16, dropout 0.1; "
              "dense F=%lld against E=%lld top-%lld moe-ffn=%lld\n",
              static_cast<long long>(kLayers), static_cast<long long>(kHidden), static_cast<long long>(kHeads),
              static_cast<long long>(kSeq), static_cast<long long>(kBatch), static_cast<long long>(kVocab),
              static_cast<long long>(kFfn), static_cast<long long>(kExperts), static_cast<long long>(kTopk),
              static_cast<long long>(kFfn / kTopk));
  std::printf("CPU: %s, %d OpenMP threads; medians of %d rounds of %d steps (after 1 warm-up step each)\n",
              cpu_model().c_str(), omp_get_max_threads(), rounds, steps);
  std::vector<Measured> measured(std::size(kSettings));
  for (size_t k = 0; k < std::size(kSettings); ++k) {
    mt::ModelConfig c = model(kSettings[k]);
    c.finalize();  // the formula reads derived sizes (query groups, padded vocabulary)
    measured[k].flops = mt::flops_per_iteration(c, kBatch);
  }
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < std::size(kSettings); ++k) {
      if (!selected(k)) continue;
      mt::Trainer trainer(model(kSettings[k]), run(steps + 1));
      trainer.train_step();  // warm-up: pages in the arenas, starts the threads
      std::vector<double> ms;
      mt::IterationStats last;
      for (int i = 0; i < steps; ++i) {
        last = trainer.train_step();
        ms.push_back(last.elapsed_ms);
      }
      measured[k].ms.push_back(median(ms));
      if (kSettings[k].moe) {
        measured[k].load.push_back(last.moe.tokens_mean > 0.0 ? last.moe.tokens_max / last.moe.tokens_mean : 0.0);
        measured[k].dropped.push_back(last.moe.dropped_fraction);
      }
    }

  std::printf("FLOPs/iteration (Megatron's formula): dense %.4e, moe %.4e (%s)\n", measured[0].flops,
              measured[1].flops, measured[0].flops == measured[1].flops ? "equal" : "DIFFERENT");
  std::printf("%-19s | %9s | %9s | %11s | %8s | %13s | %7s\n", "config", "ms/iter", "tokens/s", "GFLOP/iter",
              "GFLOP/s", "max/mean rows", "dropped");
  std::vector<double> tps(std::size(kSettings));
  for (size_t k = 0; k < std::size(kSettings); ++k) {
    if (!selected(k)) continue;
    const Measured& m = measured[k];
    const double ms = median(m.ms);
    tps[k] = tokens / (ms * 1e-3);
    std::printf("%-19s | %9.1f | %9.0f | %11.2f | %8.1f |", kSettings[k].name, ms, tps[k], m.flops * 1e-9,
                m.flops / (ms * 1e-3) * 1e-9);
    if (kSettings[k].moe) std::printf(" %13.2f | %6.2f%%\n", median(m.load), 100.0 * median(m.dropped));
    else std::printf(" %13s | %7s\n", "-", "-");
  }
  if (only) return 0;
  std::printf("tokens/s ratios: grouped / loop %.2fx; moe loop / dense %.2fx; moe grouped / dense %.2fx; "
              "cf1.25 / dropless grouped %.2fx\n",
              tps[2] / tps[1], tps[1] / tps[0], tps[2] / tps[0], tps[3] / tps[2]);
  return 0;
}
