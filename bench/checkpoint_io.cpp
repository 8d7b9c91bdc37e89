// bench/checkpoint_io: how long `--save` and `--load` take for GPT-2 124M with its optimizer
// state (f32: weights, Adam's two moments), against the disk's own sequential write and read
// rates measured by dd in the same run, in the same directory. Usage:
//   OMP_NUM_THREADS=2 build/bench/checkpoint_io [--dir DIR] [--rounds R]
// Prints medians over the rounds: save and load seconds, bytes written, and the rates as a
// fraction of dd's (write with conv=fsync, read after dropping nothing: the page cache may hold
// the file, for dd and for the load alike). A benchmark: it never fails on time.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "app/blas_tuning.h"
#include "ckpt/checkpoint_dir.h"
#include "median.h"
#include "train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// dd's rate in bytes per second for `command` (its last line says "..., X s, ...").
double dd_rate(const std::string& command, double bytes) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return 0.0;
  char line[512];
  double seconds = 0.0;
  while (std::fgets(line, sizeof line, pipe)) {
    const char* comma = std::strstr(line, "copied, ");
    if (comma) seconds = std::atof(comma + 8);
  }
  ::pclose(pipe);
  return seconds > 0.0 ? bytes / seconds : 0.0;
}

uint64_t directory_bytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  mt::retune_openblas_or_continue(argv);
  std::string dir = (fs::temp_directory_path() / "mt_checkpoint_io").string();
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: checkpoint_io [--dir DIR] [--rounds R]\n");
      return 2;
    }
  }
  mt::ModelConfig m;  // GPT-2 124M
  m.num_layers = 12;
  m.hidden_size = 768;
  m.num_attention_heads = 12;
  m.seq_length = 256;
  m.max_position_embeddings = 1024;
  m.vocab_size = 50257;
  mt::TrainConfig t;
  t.micro_batch_size = 1;
  t.train_iters = 100;
  t.eval_iters = 0;
  t.schedule.lr = 1e-4;
  mt::Trainer trainer(m, t);
  fs::remove_all(dir);
  std::vector<double> save, load;
  uint64_t bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    // A new iteration each round (a save replacing one of the same iteration also deletes it).
    fs::remove_all(dir);
    trainer.train_step();
    auto start = Clock::now();
    trainer.save_checkpoint(dir);
    save.push_back(seconds_since(start));
    bytes = directory_bytes(mt::iteration_dir(dir, trainer.iteration()));
    mt::TrainConfig resume = t;
    resume.checkpoint.load = dir;
    mt::Trainer loader(m, resume);
    start = Clock::now();
    loader.load_checkpoint(dir);
    load.push_back(seconds_since(start));
  }
  const std::string probe = (fs::path(dir) / "dd_probe").string();
  const long mib = static_cast<long>(bytes >> 20) + 1;
  const double write = dd_rate("dd if=/dev/zero of=" + probe + " bs=1M count=" + std::to_string(mib) + " conv=fsync",
                               static_cast<double>(mib) * (1 << 20));
  const double read = dd_rate("dd if=" + probe + " of=/dev/null bs=1M", static_cast<double>(mib) * (1 << 20));
  fs::remove_all(dir);
  const double s = median(save), l = median(load), gb = static_cast<double>(bytes) / 1e9;
  std::printf("checkpoint_io: GPT-2 124M with optimizer state (f32), %d rounds, %.3f GB per checkpoint\n", rounds, gb);
  std::printf("save %.2f s (%.0f MB/s; dd write with fsync %.0f MB/s: %.2fx) | load %.2f s (%.0f MB/s; dd read %.0f MB/s: "
              "%.2fx)\n",
              s, gb * 1e3 / s, write / 1e6, gb * 1e9 / s / write, l, gb * 1e3 / l, read / 1e6, gb * 1e9 / l / read);
  return 0;
}
