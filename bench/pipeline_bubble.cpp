// bench/pipeline_bubble: how much of the ideal pipeline speed-up 1F1B and interleaved 1F1B reach.
// Run under mpirun with p ranks (one thread each), e.g.
//   OMP_NUM_THREADS=1 mpirun -np 2 build/bench/pipeline_bubble [--rounds R] [--steps N]
// For m = 2, 4, 8 micro-batches per step, each round times N steps of: the whole model on one
// rank (every rank runs it alone, at once: its one-core step time T1), the model cut into p
// stages (1F1B), the same with the layers split unevenly to balance the output layer (p = 2: 5 + 3
// layers), and into 2p virtual stages (interleaved, v = 2). Prints medians over the rounds:
//   efficiency = T1 / (p · Tp), against the ideal m / (m + p − 1) (1F1B) and
//   m·v / (m·v + p − 1) (interleaved), which count the bubble only (Narayanan et al.): the gap is
// the point-to-point transfers and the stages' imbalance (the last stage also runs the output
// layer, here 2·h·V = 4.2 MFLOP per token against 1.8 for a layer). A benchmark: it never fails on
// time. Rank 0 prints.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "comm/mpi_communicator.h"
#include "median.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

mt::ModelConfig model() {
  mt::ModelConfig m;  // GPT-2 style, 8 layers: 4 or 2 per stage for p = 2 or 4
  m.num_layers = 8;
  m.hidden_size = 256;
  m.num_attention_heads = 8;
  m.seq_length = 256;
  m.vocab_size = 8192;
  m.activation = mt::Activation::gelu_tanh;
  return m;
}

mt::TrainConfig run(int m, int pp, int v, int steps, bool uneven = false) {
  mt::TrainConfig t;
  t.micro_batch_size = 1;
  t.global_batch_size = m;
  t.train_iters = steps;
  t.eval_iters = 0;
  t.log_interval = 1000;
  t.schedule.lr = 1e-4;
  t.pipeline.pp = pp;
  if (v > 1) t.pipeline.virtual_stages_per_rank = v;
  if (uneven) {  // one layer more on the first stage, one fewer on the last (which has the output layer)
    t.pipeline.first_stage_layers = 8 / pp + 1;
    t.pipeline.last_stage_layers = 8 / pp - 1;
  }
  return t;
}

// Seconds per step (median) of `steps` steps after one warm-up step; all ranks start together.
double step_seconds(mt::Trainer& trainer, mt::Communicator& world, int steps) {
  trainer.train_step();
  std::vector<double> s;
  for (int i = 0; i < steps; ++i) {
    world.barrier();
    const auto t0 = Clock::now();
    trainer.train_step();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(s);
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  int rounds = 3, steps = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: pipeline_bubble [--rounds R] [--steps N]\n");
      return 2;
    }
  }
  std::unique_ptr<mt::Communicator> world = mt::make_mpi_world_communicator();
  const int p = world->size();
  if (world->rank() == 0)
    std::printf("pipeline_bubble: %d ranks, GPT-2 style L=8 h=256 s=256 V=8192, micro-batch 1; %d rounds of %d steps\n"
                "%4s | %8s | %9s | %10s | %5s | %11s | %10s | %8s | %10s | %5s\n",
                p, rounds, steps, "m", "T1 (ms)", "1F1B (ms)", "efficiency", "ideal", "uneven (ms)", "efficiency",
                "v=2 (ms)", "efficiency", "ideal");
  for (int m : {2, 4, 8}) {
    std::vector<double> alone, one_f_one_b, uneven, interleaved;
    for (int r = 0; r < rounds; ++r) {
      {
        mt::Trainer trainer(model(), run(m, 1, 1, steps + 1));  // this rank alone
        world->barrier();
        alone.push_back(step_seconds(trainer, *world, steps));
      }
      {
        mt::Trainer trainer(model(), run(m, p, 1, steps + 1), world.get());
        one_f_one_b.push_back(step_seconds(trainer, *world, steps));
      }
      {
        mt::Trainer trainer(model(), run(m, p, 1, steps + 1, true), world.get());
        uneven.push_back(step_seconds(trainer, *world, steps));
      }
      if (m >= p) {  // interleaving needs p <= m
        mt::Trainer trainer(model(), run(m, p, 2, steps + 1), world.get());
        interleaved.push_back(step_seconds(trainer, *world, steps));
      }
    }
    if (world->rank() != 0) continue;
    const double t1 = median(alone), a = median(one_f_one_b), u = median(uneven);
    const double ideal = double(m) / (m + p - 1), ideal_v = 2.0 * m / (2.0 * m + p - 1);
    std::printf("%4d | %8.1f | %9.1f | %9.0f%% | %4.0f%% | %11.1f | %9.0f%% |", m, t1 * 1e3, a * 1e3,
                100 * t1 / (p * a), 100 * ideal, u * 1e3, 100 * t1 / (p * u));
    if (interleaved.empty())
      std::printf(" %8s | %10s | %5s\n", "-", "-", "-");
    else {
      const double b = median(interleaved);
      std::printf(" %8.1f | %9.0f%% | %4.0f%%\n", b * 1e3, 100 * t1 / (p * b), 100 * ideal_v);
    }
    std::fflush(stdout);
  }
  return 0;
}
