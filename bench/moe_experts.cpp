// bench/moe_experts: tokens/s of the MoE expert MLP (ops/moe_experts.h) as the grouped kernel
// (Megatron's GroupedMLP, --moe-grouped-gemm) against the per-expert loop of linear ops (SequentialMLP),
// forward and forward + backward, at h = 512 and T tokens with SwiGLU experts of the same active
// FLOPs per token in two shapes:
//   E = 8,  top-2, ffn = 1024   (Mixtral-like)
//   E = 64, top-8, ffn = 256    (fine-grained, DeepSeek-like)
// and two routings: uniform (k distinct experts uniformly per token) and skewed (expert e drawn
// with weight 1/(e+1), without replacement). Permute/unpermute time is printed beside them for scale.
// Implementations alternate within each round so drift on a shared machine falls on both alike;
// the ratio is grouped over sequential from the same run. A benchmark: it never fails on time.
//   build/bench/moe_experts [--tokens T] [--rounds R]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "median.h"
#include "ops/moe_experts.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t experts, topk, ffn;
};

const Shape kShapes[] = {{"E=8 top-2 ffn=1024", 8, 2, 1024}, {"E=64 top-8 ffn=256", 64, 8, 256}};
constexpr int64_t kHidden = 512;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// routing_map u8 [T, E]: k distinct experts per token, uniform or with weight 1/(e+1).
std::vector<uint8_t> make_map(int64_t tokens, int64_t experts, int64_t topk, bool skewed, uint32_t seed) {
  std::vector<uint8_t> map(static_cast<size_t>(tokens * experts), 0);
  std::mt19937 gen(seed);
  std::vector<double> weight(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) weight[e] = skewed ? 1.0 / static_cast<double>(e + 1) : 1.0;
    for (int64_t j = 0; j < topk; ++j) {
      std::discrete_distribution<int64_t> pick(weight.begin(), weight.end());
      const int64_t e = pick(gen);
      map[t * experts + e] = 1;
      weight[e] = 0.0;
    }
  }
  return map;
}

std::vector<float> randn(int64_t n, uint32_t seed, float std) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, std);
  for (float& x : v) x = d(gen);
  return v;
}

mt::TensorView view(std::vector<float>& v, mt::Shape s) { return {v.data(), mt::DType::f32, s}; }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void run(const Shape& shape, bool skewed, int64_t tokens, int rounds) {
  const int64_t e_count = shape.experts, h = kHidden, ffn = shape.ffn, f1 = 2 * ffn;
  std::vector<uint8_t> map = make_map(tokens, e_count, shape.topk, skewed, 7);
  const mt::TensorView map_v(map.data(), mt::DType::u8, {tokens, e_count});
  std::vector<float> x = randn(tokens * h, 1, 1.0f), probs(static_cast<size_t>(tokens * e_count), 0.5f);
  const int64_t rows = mt::moe_permuted_rows(map_v);
  std::vector<float> permuted(rows * h), out(rows * h), pre(rows * f1), act(rows * ffn), dact(rows * ffn),
      dpre(rows * f1), dinp(rows * h), dout = randn(rows * h, 2, 1.0f), combined(tokens * h);
  std::vector<int32_t> row_token(rows), counts(e_count);
  std::vector<float> w1 = randn(e_count * f1 * h, 3, 0.02f), w2 = randn(e_count * h * ffn, 4, 0.02f);
  std::vector<float> dw1(w1.size(), 0.0f), dw2(w2.size(), 0.0f);
  const mt::TensorView counts_v(counts.data(), mt::DType::i32, {e_count}),
      row_token_v(row_token.data(), mt::DType::i32, {rows});

  // Permute and combine (timed once per round, shared by both implementations).
  std::vector<double> t_perm;
  auto permute_combine = [&] {
    const auto t0 = Clock::now();
    mt::moe_permute_fwd(view(permuted, {rows, h}), row_token_v, counts_v, view(x, {tokens, h}), map_v);
    mt::moe_unpermute_fwd(view(combined, {tokens, h}), view(out, {rows, h}), row_token_v, counts_v,
                          view(probs, {tokens, e_count}));
    t_perm.push_back(seconds_since(t0));
  };
  permute_combine();
  int32_t largest = 0;
  for (int32_t n : counts) largest = std::max(largest, n);

  auto step = [&](mt::MoeExpertsImpl impl, double& fwd_s, double& total_s) {
    mt::MoeExpertsOptions o;
    o.activation = mt::MoeExpertActivation::swiglu;
    o.impl = impl;
    const auto t0 = Clock::now();
    mt::moe_experts_fwd(view(out, {rows, h}), view(pre, {rows, f1}), view(act, {rows, ffn}), view(permuted, {rows, h}),
                        counts_v, view(w1, {e_count, f1, h}), view(w2, {e_count, h, ffn}), o);
    fwd_s = seconds_since(t0);
    mt::moe_experts_bwd(view(dinp, {rows, h}), view(dw1, {e_count, f1, h}), view(dw2, {e_count, h, ffn}),
                        view(dout, {rows, h}), view(permuted, {rows, h}), view(pre, {rows, f1}), counts_v,
                        view(w1, {e_count, f1, h}), view(w2, {e_count, h, ffn}), view(act, {rows, ffn}),
                        view(dact, {rows, ffn}), view(dpre, {rows, f1}), o);
    total_s = seconds_since(t0);
  };
  std::vector<double> fwd[2], total[2];
  double f, t;
  step(mt::MoeExpertsImpl::sequential, f, t);  // warm-up: page in every buffer, start the threads
  step(mt::MoeExpertsImpl::grouped, f, t);
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < 2; ++i) {
      step(i == 0 ? mt::MoeExpertsImpl::sequential : mt::MoeExpertsImpl::grouped, f, t);
      fwd[i].push_back(f);
      total[i].push_back(t);
    }
    permute_combine();
  }
  const double flops = 2.0 * static_cast<double>(rows) * h * (f1 + ffn);  // forward; backward is 2x
  std::printf("%-20s %-8s rows %6lld (largest expert %5d)  permute+combine %7.2f ms\n", shape.name,
              skewed ? "skewed" : "uniform", static_cast<long long>(rows), largest, 1e3 * median(t_perm));
  for (int i = 0; i < 2; ++i) {
    const double mf = median(fwd[i]), mt_ = median(total[i]);
    std::printf("    %-10s fwd %8.2f ms %9.0f tok/s %6.1f GFLOP/s | fwd+bwd %8.2f ms %9.0f tok/s %6.1f GFLOP/s\n",
                i == 0 ? "sequential" : "grouped", 1e3 * mf, tokens / mf, flops / mf * 1e-9, 1e3 * mt_,
                tokens / mt_, 3.0 * flops / mt_ * 1e-9);
  }
  std::printf("    grouped / sequential tokens/s: fwd %.2fx, fwd+bwd %.2fx\n", median(fwd[0]) / median(fwd[1]),
              median(total[0]) / median(total[1]));
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  int64_t tokens = 4096;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokens")) tokens = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
  }
  std::printf("moe_experts: SwiGLU experts, h = %lld, T = %lld tokens, %d OpenMP threads, medians of %d rounds\n",
              static_cast<long long>(kHidden), static_cast<long long>(tokens), omp_get_max_threads(), rounds);
  std::printf("CPU: %s\n", cpu_model().c_str());
  for (const Shape& s : kShapes)
    for (bool skewed : {false, true}) run(s, skewed, tokens, rounds);
  return 0;
}
