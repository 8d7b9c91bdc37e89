// bench/recompute: what activation recomputation saves and costs (Korthikanti et al., Table 4's
// question) where attention memory matters: a GPT layer stack with a long sequence and many heads
// (s = 1024, 16 heads of 16, h = 256; the [b, n, s, s] scores are 80 MiB a layer, the rest 6 MiB),
// bf16 with dropout 0.1, trained for a few steps in one process under each setting:
//   none       the scores materialised and kept (--attention-backend unfused), nothing rerun
//   selective  core attention recomputed (--recompute-activations: the flash path, which keeps
//              only the log-sum-exp and remakes the probabilities in its backward)
//   full       every layer rerun from its input in the backward (--recompute-granularity full,
//              uniform groups of one layer; unfused attention, as none)
// Prints per setting the activations a layer keeps per micro-batch (the ledger of the buffers the
// stage carved), the stage's whole activation arena, the median step time over rounds of steps,
// and the time overhead over none; then selective's overhead as a fraction of full's. Settings run
// round-robin so drift on a shared machine falls on all alike. A benchmark: it never fails on time.
//   build/bench/recompute [--rounds R] [--steps N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "base/memory.h"
#include "median.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Setting {
  const char* name;
  mt::RecomputeGranularity granularity;
  mt::AttentionImpl attention;
};

const Setting kSettings[] = {
    {"none", mt::RecomputeGranularity::none, mt::AttentionImpl::unfused},
    {"selective", mt::RecomputeGranularity::selective, mt::AttentionImpl::flash},
    {"full", mt::RecomputeGranularity::full, mt::AttentionImpl::unfused},
};

mt::ModelConfig model(const Setting& setting) {
  mt::ModelConfig m;
  m.num_layers = 4;
  m.hidden_size = 256;
  m.num_attention_heads = 16;
  m.seq_length = 1024;
  m.vocab_size = 1024;  // a small output layer: the layers' time dominates
  m.params_dtype = mt::DType::bf16;
  m.recompute_granularity = setting.granularity;
  m.recompute_method = mt::RecomputeMethod::uniform;
  m.recompute_num_layers = 1;
  m.attention_impl = setting.attention;
  return m;
}

mt::TrainConfig run(int steps) {
  mt::TrainConfig t;
  t.micro_batch_size = 1;
  t.global_batch_size = 1;
  t.train_iters = steps;
  t.eval_iters = 0;
  t.log_interval = 1000;
  t.schedule.lr = 1e-4;
  t.loss_scale.bf16 = true;
  return t;
}

struct Measured {
  double layer_bytes = 0.0, stage_bytes = 0.0;
  std::vector<double> ms;
};

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  int rounds = 3, steps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: recompute [--rounds R] [--steps N]\n");
      return 2;
    }
  }
  std::printf("recompute: L=4 h=256 heads=16 s=1024 b=1 V=1024, bf16, dropout 0.1; %d rounds of %d steps each\n",
              rounds, steps);
  std::vector<Measured> measured(std::size(kSettings));
  for (int r = 0; r < rounds; ++r)
    for (size_t k = 0; k < std::size(kSettings); ++k) {
      mt::Trainer trainer(model(kSettings[k]), run(steps + 1));
      const mt::Stage& stage = trainer.model();
      int64_t layers = 0;
      for (int64_t i = 0; i < stage.range().num_layers(); ++i) layers += mt::ledger_bytes(stage.layer_ledger(i));
      measured[k].layer_bytes = static_cast<double>(layers) / static_cast<double>(stage.range().num_layers());
      measured[k].stage_bytes = static_cast<double>(stage.activation_bytes());
      trainer.train_step();  // warm-up
      std::vector<double> ms;
      for (int i = 0; i < steps; ++i) {
        const auto t0 = Clock::now();
        trainer.train_step();
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      measured[k].ms.push_back(median(ms));
    }
  const double none = median(measured[0].ms);
  std::printf("%-10s | %17s | %17s | %9s | %17s\n", "recompute", "per layer (bytes)", "stage activations", "ms/iter",
              "overhead vs none");
  for (size_t k = 0; k < std::size(kSettings); ++k) {
    const double ms = median(measured[k].ms);
    std::printf("%-10s | %17s | %17s | %9.1f | %+16.1f%%\n", kSettings[k].name,
                mt::format_bytes(static_cast<size_t>(measured[k].layer_bytes)).c_str(),
                mt::format_bytes(static_cast<size_t>(measured[k].stage_bytes)).c_str(), ms, 100.0 * (ms / none - 1.0));
  }
  const double selective = median(measured[1].ms) - none, full = median(measured[2].ms) - none;
  std::printf("selective's time overhead is %.2f of full's (%.1f ms against %.1f ms)\n", selective / full, selective,
              full);
  return 0;
}
