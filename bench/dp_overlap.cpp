// bench/dp_overlap: data-parallel training steps with --overlap-grad-reduce on and off, and how
// much of the gradient reduction the overlap hides behind the backward. Run under mpirun (one
// thread per rank), e.g.
//   OMP_NUM_THREADS=1 mpirun -np 2 build/bench/dp_overlap [--rounds R] [--steps N] [--distributed-optimizer]
// Each round times N steps without overlap, then N with it (alternating, so machine drift falls
// on both), then the same buckets' reduction alone, blocking (all-reduces, or reduce-scatters +
// all-gathers). Prints medians over the rounds and
//   hidden = (step without overlap − step with overlap) / reduction alone,
// the fraction of the reduction the overlap took off the step (0 when it hides nothing; it can
// come out negative when the non-blocking path costs more than it hides). A benchmark: it never
// fails on time. Rank 0 prints.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "comm/mpi_communicator.h"
#include "median.h"
#include "optim/grad_sync.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

mt::ModelConfig model() {
  mt::ModelConfig m;  // GPT-2 style, ~27M parameters: a gradient buffer worth reducing
  m.num_layers = 4;
  m.hidden_size = 512;
  m.num_attention_heads = 8;
  m.seq_length = 256;
  m.vocab_size = 32768;
  m.activation = mt::Activation::gelu_tanh;
  return m;
}

mt::TrainConfig run(int dp, int steps, bool overlap, bool distributed) {
  mt::TrainConfig t;
  t.micro_batch_size = 2;
  t.global_batch_size = 4 * dp;  // two micro-batches per rank
  t.train_iters = steps;
  t.eval_iters = 0;
  t.log_interval = 1000;
  t.schedule.lr = 1e-4;
  t.overlap_grad_reduce = overlap;
  t.ddp_bucket_size = 2'000'000;  // several buckets for this model
  t.use_distributed_optimizer = distributed;
  return t;
}

// Seconds per step (median) of `steps` steps after one warm-up step.
double step_seconds(mt::Trainer& trainer, int steps) {
  trainer.train_step();
  std::vector<double> s;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    trainer.train_step();
    s.push_back(seconds_since(t0));
  }
  return median(s);
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  int rounds = 3, steps = 4;
  bool distributed = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--distributed-optimizer")) distributed = true;
    else {
      std::fprintf(stderr, "usage: dp_overlap [--rounds R] [--steps N] [--distributed-optimizer]\n");
      return 2;
    }
  }
  std::unique_ptr<mt::Communicator> world = mt::make_mpi_world_communicator();
  const int dp = world->size();
  std::vector<double> off, on, alone;
  double parameters = 0.0;
  for (int r = 0; r < rounds; ++r) {
    for (bool overlap : {false, true}) {
      mt::Trainer trainer(model(), run(dp, steps + 1, overlap, distributed), world.get());
      (overlap ? on : off).push_back(step_seconds(trainer, steps));
      if (!overlap) continue;
      // The same buckets' reduction alone, blocking, on this trainer's buffers.
      mt::ParamStore& params = trainer.model().params();
      parameters = static_cast<double>(params.numel());
      mt::DdpConfig blocking{dp};  // the same buffers, reduced blocking
      blocking.use_distributed_optimizer = distributed;
      mt::DataParallelSync sync(params, {nullptr, trainer.groups().dp_cp.get()}, blocking, mt::cpu_backend(), nullptr);
      std::vector<double> s;
      for (int i = 0; i < steps; ++i) {
        world->barrier();
        const auto t0 = Clock::now();
        sync.reduce_grads();
        sync.gather_params();
        s.push_back(seconds_since(t0));
      }
      alone.push_back(median(s));
    }
  }
  if (world->rank() == 0) {
    const double a = median(off), b = median(on), c = median(alone);
    std::printf("dp_overlap: %d ranks, %s, GPT-2 style L=4 h=512 s=256 V=32768 (%.1fM parameters), 2 micro-batches "
                "of 2 per rank, buckets of 2M elements; %d rounds of %d steps\n",
                dp, distributed ? "distributed optimizer" : "plain DDP", parameters / 1e6, rounds, steps);
    std::printf("step without overlap %.1f ms | with overlap %.1f ms | reduction alone %.1f ms | hidden %.0f%%\n",
                a * 1e3, b * 1e3, c * 1e3, 100.0 * (a - b) / c);
  }
  return 0;
}
