// `megatron train`: maps the option table onto ModelConfig and TrainConfig, checks the data flags
// and runs the trainer, printing what Megatron's pretrain_gpt.py prints on its logging rank.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/device_selection.h"
#include "app/options.h"
#include "app/train_flags.h"
#include "app/tokenizer_flags.h"
#include "base/memory.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer.h"
#include "ops/op_profile.h"
#include "train/checkpoint_args.h"
#include "train/trainer.h"

namespace mt {

namespace {

bool has_data_path(const Options& o) {
  for (const char* f : {"--data-path", "--train-data-path", "--valid-data-path", "--test-data-path"})
    if (o.has(f)) return true;
  return false;
}

// The data flags: --mock-data (NullTokenizer ids) or .bin/.idx files (--data-path or per-split
// paths) read with the tokenizer's ids.
void check_data_options(const Options& o) {
  MT_CHECK(!(o.flag("--mock-data") && has_data_path(o))) << "--mock-data excludes --data-path and the per-split paths";
  MT_CHECK(o.flag("--mock-data") || has_data_path(o))
      << "no training data: pass --data-path PREFIX (a .bin/.idx pair written by `megatron preprocess`), "
      << "or --mock-data for Megatron's synthetic data";
  if (o.flag("--mock-data")) {
    MT_CHECK(!o.has("--tokenizer-type") || o.text("--tokenizer-type") == "NullTokenizer")
        << "--mock-data reads NullTokenizer ids: use --tokenizer-type NullTokenizer --vocab-size V";
    MT_CHECK(o.has("--vocab-size")) << "--mock-data needs --vocab-size (token ids are 0..V-1, EOD = V-1)";
    MT_CHECK(!o.has("--null-tokenizer-eod-id"))
        << "--null-tokenizer-eod-id is not supported with --mock-data (its EOD is V-1); drop it";
  }
  if (o.has("--split")) (void)parse_and_normalize_split(o.text("--split"));  // validated as Megatron parses it
  if (o.has("--data-cache-path")) {
    MT_CHECK(!o.text("--data-cache-path").empty()) << "--data-cache-path is empty";
  }
}

// --data-path & co: the splits sized for this run (which needs the data-parallel size).
TrainData real_train_data(const Options& o, const ModelConfig& model, const TrainConfig& train, const Tokenizer& tok,
                          Communicator* world) {
  const std::array<int64_t, 3> sizes = train_dataset_sizes(model, train, world ? world->size() : 1);
  GptDataConfig c;
  if (o.has("--data-path")) c.blend = parse_blend(o.list("--data-path"), "--data-path");
  const char* per_split[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
  for (int s = 0; s < 3; ++s)
    if (o.has(per_split[s])) c.blend_per_split[s] = parse_blend(o.list(per_split[s]), per_split[s]);
  if (o.has("--split")) c.split = o.text("--split");
  if (o.has("--data-cache-path")) c.cache_path = o.text("--data-cache-path");
  c.gpt.sequence_length = model.seq_length;
  MT_CHECK(train.seed <= 0xffffffffull) << "--seed " << train.seed << " is too large: the data shuffle takes a 32-bit seed";
  c.gpt.random_seed = static_cast<uint32_t>(train.seed);
  c.gpt.eod_mask_loss = train.eod_mask_loss;
  c.gpt.reset_position_ids = train.reset_position_ids;
  c.gpt.reset_attention_mask = train.reset_attention_mask;
  c.gpt.eod_token = tok.eod();
  c.gpt.pad_token = tok.pad().value_or(-1);
  if (world == nullptr || world->size() == 1) return build_gpt_train_data(c, sizes);
  // Megatron's protocol: rank 0 builds the indices and writes the cache, the others then load it
  // (an error on rank 0 aborts the whole job, so nobody waits at the barrier forever).
  std::optional<TrainData> data;
  if (world->rank() == 0) data = build_gpt_train_data(c, sizes);
  world->barrier();
  if (world->rank() != 0) data = build_gpt_train_data(c, sizes);
  return std::move(*data);
}

}  // namespace

namespace {

// --log-memory: what each layer of this rank's stages keeps between its forward and its backward,
// per micro-batch, tensor by tensor (the activation ledger of the buffers carved for it).
void print_activation_ledger(Trainer& trainer, const std::function<void(const std::string&)>& print) {
  for (int c = 0; c < trainer.chunks(); ++c) {
    const Stage& stage = trainer.model(c);
    const StageRange& r = stage.range();
    print("activation memory of layers " + std::to_string(r.first_layer) + ".." + std::to_string(r.last_layer - 1) +
          " (per layer and micro-batch; " + std::to_string(stage.slots()) + " micro-batches in flight):");
    std::vector<std::vector<LedgerEntry>> ledgers;
    for (int64_t i = r.first_layer; i < r.last_layer; ++i) ledgers.push_back(stage.layer_ledger(i));
    if (ledgers.empty() || ledgers[0].empty()) continue;
    const auto row = [](std::string label, const std::vector<std::string>& cells) {
      label.resize(std::max<size_t>(label.size() + 1, 30), ' ');
      for (const std::string& cell : cells) label += std::string(cell.size() < 12 ? 12 - cell.size() : 1, ' ') + cell;
      return label;
    };
    std::vector<std::string> header;
    for (int64_t i = r.first_layer; i < r.last_layer; ++i) header.push_back("layer " + std::to_string(i));
    print(row("", header));
    for (size_t e = 0; e < ledgers[0].size(); ++e) {
      std::vector<std::string> cells;
      for (const auto& ledger : ledgers) cells.push_back(format_bytes(static_cast<size_t>(ledger[e].bytes)));
      print(row("  " + ledgers[0][e].what, cells));
    }
    int64_t total = 0;
    for (const auto& ledger : ledgers) total += ledger_bytes(ledger);
    print("  layers x micro-batches: " + format_bytes(static_cast<size_t>(total * stage.slots())) +
          " of the stage's " + format_bytes(stage.activation_bytes()) +
          " saved activations (the rest: inputs, embedding, head, recompute pool)");
  }
}

}  // namespace

int cmd_train(const std::vector<std::string>& args, Communicator* world) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("train").c_str(), stdout);
      return 0;
    }
  const Options options = parse_options("train", args);
  if (options.flag("--print-config")) {
    std::fputs(options.to_yaml().c_str(), stdout);
    return 0;
  }
  check_data_options(options);
  ModelConfig model = model_config(options);
  TrainConfig train = train_config(options);
  if (options.flag("--use-checkpoint-args")) {
    MT_CHECK(!train.checkpoint.load.empty()) << "--use-checkpoint-args reads the model from --load DIR; pass --load";
    apply_checkpoint_args(train.checkpoint.load, train.checkpoint.ckpt_step, model);
  }
  if (has_tokenizer_flags(options)) train.checkpoint.tokenizer = tokenizer_record(tokenizer_options(options));
  std::optional<TrainData> data;
  if (!options.flag("--mock-data")) {
    const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_options(options));
    model.vocab_size = tokenizer->vocab_size();  // padded by the model to --make-vocab-size-divisible-by
    data = real_train_data(options, model, train, *tokenizer, world);
  }
  // The estimate of the time left is for people watching a terminal, never for pipes and CI logs
  // (mpirun hands its ranks a pseudo-terminal whatever its own output is, so only single-rank),
  // unless --log-progress asks for it (under mpirun, say).
  train.show_progress = options.flag("--log-progress") ||
                        (isatty(STDOUT_FILENO) == 1 && (world == nullptr || world->size() == 1));
  // Megatron prints from the last rank (print_rank_last): it holds the loss under pipelining.
  const bool logging_rank = world == nullptr || world->rank() == world->size() - 1;
  const auto print = [logging_rank](const std::string& line) {
    if (!logging_rank) return;
    std::puts(line.c_str());
    std::fflush(stdout);
  };
  if (!data && options.has("--split") && options.text("--split") != "1,1,1")
    print("note: --split " + options.text("--split") + " is ignored: mock data always uses the split 1,1,1 (as Megatron)");
  // The app decides where the run lives (--device), and says so first.
  const RunDevice device = select_device(options, world);
  print(device.summary);
  if (const std::string notes = options.megatron_notes_line(); !notes.empty()) print(notes);
  for (const std::string& note : inert_flag_notes(options, model)) print("note: " + note);
  if (options.flag("--fine-grained-activation-offloading")) {
    MT_CHECK(device.device != Device::cuda) << "--fine-grained-activation-offloading is not implemented in "
                                               "megatron.cpp: activation offloading to host memory on CUDA";
    print("note: --fine-grained-activation-offloading has no effect on the CPU backend: activations live in host "
          "memory already");
  }
  set_op_profiling(options.flag("--profile-ops"));
  const RunContext context{device.world, device.backend};
  std::unique_ptr<Trainer> owned = data ? std::make_unique<Trainer>(model, train, std::move(*data), context)
                                        : std::make_unique<Trainer>(model, train, context);
  Trainer& trainer = *owned;
  const ProcessGroups& g = trainer.groups();
  print("model: " + trainer.model().config().summary());
  print("layout: " + std::to_string(g.grid.world_size()) + " ranks = tensor parallel " + std::to_string(g.grid.tp()) +
        (model.sequence_parallel && g.grid.tp() > 1 ? " (sequence parallel)" : "") + " x pipeline parallel " +
        std::to_string(g.grid.pp()) + " x data parallel " + std::to_string(g.grid.dp()));
  int64_t parameters = 0;
  for (int c = 0; c < trainer.chunks(); ++c)
    for (ParamStore* store : trainer.model(c).param_stores()) parameters += store->numel();
  print("parameters on this rank: " + std::to_string(parameters));
  if (options.flag("--log-memory")) print_activation_ledger(trainer, print);
  if (!train.checkpoint.load.empty()) {
    const std::string& dir = train.checkpoint.load;
    const int64_t loaded = trainer.load_checkpoint(dir);
    if (loaded < 0)
      print("WARNING: could not find a checkpoint in " + dir + " (no latest_checkpointed_iteration.txt); will not "
            "load any checkpoint and will start from random");
    else
      print("  successfully loaded checkpoint from " + dir + " [ t " + std::to_string(g.grid.tp()) + ", p " +
            std::to_string(g.grid.pp()) + " ] at iteration " + std::to_string(loaded));
  }
  trainer.run(print);
  return 0;
}

}  // namespace mt
