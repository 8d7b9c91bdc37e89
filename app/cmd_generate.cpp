// `megatron generate`: continue prompts with a trained (or imported) model, with the flags of
// Megatron's inference scripts. The checkpoint carries the model and the tokenizer settings, so
// --load alone is enough (tokenizer flags on the command line replace the recorded ones). Under
// mpirun the ranks form one tensor-parallel group; every rank runs the same generation and rank 0
// prints. The work is in infer/; this file maps flags, tokenizes and reports.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/options.h"
#include "app/tokenizer_flags.h"
#include "base/error.h"
#include "ckpt/checkpoint_dir.h"
#include "infer/generate.h"
#include "train/checkpoint_args.h"
#include "train/checkpoint_reader.h"

namespace mt {

namespace {

std::vector<std::string> read_prompts(const Options& o) {
  std::vector<std::string> prompts;
  if (o.has("--prompts")) prompts = o.list("--prompts");
  if (o.has("--prompt-file")) {
    const std::string path = o.text("--prompt-file");
    std::ifstream in(path);
    MT_CHECK(in) << "cannot open --prompt-file " << path;
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        MT_FAIL() << path << ":" << n << " is not JSON: " << e.what();
      }
      MT_CHECK(j.is_object() && j.contains("prompt") && j.at("prompt").is_string())
          << path << ":" << n << " has no \"prompt\" string";
      prompts.push_back(j.at("prompt").get<std::string>());
    }
  }
  MT_CHECK(!prompts.empty()) << "pass --prompts \"...\" or --prompt-file FILE.jsonl";
  return prompts;
}

// --top_k / --top-k (and --top_p / --top-p): either spelling, not two different values.
template <typename T>
T either(const Options& o, const char* snake, const char* kebab, T fallback, T (*get)(const Options&, const char*)) {
  if (o.has(snake) && o.has(kebab)) {
    MT_CHECK(get(o, snake) == get(o, kebab)) << snake << " and " << kebab << " disagree; pass one";
  }
  if (o.has(snake)) return get(o, snake);
  if (o.has(kebab)) return get(o, kebab);
  return fallback;
}

int64_t get_integer(const Options& o, const char* name) { return o.integer(name); }
float get_real(const Options& o, const char* name) { return static_cast<float>(o.real(name)); }

// The generated text up to the first stop word (which ends it), and whether one was found.
bool cut_at_stop_word(std::string& text, const std::vector<std::string>& stop_words) {
  size_t cut = std::string::npos;
  for (const std::string& w : stop_words)
    if (!w.empty()) cut = std::min(cut, text.find(w));
  if (cut == std::string::npos) return false;
  text.resize(cut);
  return true;
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args, Communicator* world) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("generate").c_str(), stdout);
      return 0;
    }
  const Options o = parse_options("generate", args);
  MT_CHECK(o.has("--load")) << "pass --load DIR: a checkpoint (megatron convert --loader hf makes one from a Hugging "
                            << "Face model)";
  const int tp = world ? world->size() : 1, rank = world ? world->rank() : 0;
  std::optional<int64_t> step;
  if (o.has("--ckpt-step")) step = o.integer("--ckpt-step");
  CheckpointReader checkpoint(o.text("--load"), step);
  ModelConfig model;
  apply_model_record(checkpoint.manifest().model, checkpoint.dir() + "/manifest.json", model);
  model.seq_length = model.max_position_embeddings;
  model.hidden_dropout = model.attention_dropout = 0.0f;
  model.tensor_model_parallel_size = tp;
  model.finalize();

  MT_CHECK(has_tokenizer_flags(o) || !checkpoint.manifest().tokenizer.is_null())
      << "checkpoint " << checkpoint.dir() << " records no tokenizer; pass the tokenizer flags (--tokenizer-type ...)";
  const TokenizerOptions tokenizer_flags = has_tokenizer_flags(o) ? tokenizer_options(o)
      : tokenizer_options_from_record(checkpoint.manifest().tokenizer, checkpoint.dir() + "/manifest.json");
  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_flags);
  MT_CHECK(tokenizer->vocab_size() == model.vocab_size)
      << "the tokenizer has " << tokenizer->vocab_size() << " tokens but the model " << model.vocab_size;

  SamplingParams sampling;
  sampling.temperature = static_cast<float>(o.real("--temperature"));
  sampling.top_k = either<int64_t>(o, "--top_k", "--top-k", 1, get_integer);
  sampling.top_p = either<float>(o, "--top_p", "--top-p", 0.0f, get_real);
  sampling.seed = static_cast<uint64_t>(o.integer("--seed"));
  const std::vector<std::string> prompts = read_prompts(o);
  const std::vector<std::string> stop_words = o.has("--stop-words") ? o.list("--stop-words") : std::vector<std::string>{};
  std::vector<GenerationRequest> requests;
  int64_t longest = 0;
  for (const std::string& p : prompts) {
    GenerationRequest r;
    r.prompt = tokenizer->encode(p);
    MT_CHECK(!r.prompt.empty()) << "the prompt \"" << p << "\" has no tokens";
    r.tokens_to_generate = o.integer("--num-tokens-to-generate");
    r.sampling = sampling;
    r.log_probs = o.flag("--return-log-probs");
    r.top_n_log_probs = o.integer("--top-n-logprobs");
    longest = std::max(longest, static_cast<int64_t>(r.prompt.size()) + r.tokens_to_generate);
    requests.push_back(std::move(r));
  }

  EngineOptions engine_options;
  engine_options.slots = std::min<int64_t>(o.integer("--inference-max-requests"), static_cast<int64_t>(requests.size()));
  engine_options.max_sequence_length =
      o.has("--inference-max-seq-length") ? o.integer("--inference-max-seq-length") : std::min(longest, model.max_position_embeddings);
  engine_options.max_step_tokens = o.integer("--inference-max-step-tokens");
  engine_options.activation_dtype = checkpoint.manifest().params_dtype;
  engine_options.tp_comm = tp > 1 ? world : nullptr;
  MemoryTracker memory;
  InferenceEngine engine(model, cpu_backend(), &memory, engine_options);
  checkpoint.read_weights(engine.params().params(), tp, rank);
  Generator generator(engine, tokenizer->eod());
  const StopCheck stop = [&](size_t, const std::vector<int32_t>& generated) {
    if (stop_words.empty()) return false;
    std::string text = tokenizer->decode(generated);
    return cut_at_stop_word(text, stop_words);
  };
  GenerationStats stats;
  const std::vector<GenerationResult> results = generator.run(requests, stop, &stats);
  if (rank != 0) return 0;

  std::string lines;
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& r = results[i];
    // The text ends before an EOD that ended the generation (its id stays in generated_tokens).
    const size_t shown = r.tokens.size() - (r.finish_reason == "eod" ? 1 : 0);
    std::string text = tokenizer->decode(std::span<const int32_t>(r.tokens.data(), shown));
    cut_at_stop_word(text, stop_words);
    std::printf("prompt %zu: %s\ngenerated: %s\n\n", i, prompts[i].c_str(), text.c_str());
    nlohmann::json line = {{"prompt", prompts[i]}, {"generated_text", text}, {"generated_tokens", r.tokens},
                           {"finish_reason", r.finish_reason}};
    if (requests[i].log_probs) line["logprobs"] = {{"prompt", r.prompt_log_probs}, {"generated", r.log_probs}};
    if (requests[i].top_n_log_probs > 0) line["top_n_logprobs"] = r.top_log_probs;
    lines += line.dump() + "\n";
  }
  if (o.has("--output-path")) write_file_atomically(o.text("--output-path"), lines);
  const auto rate = [](int64_t tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; };
  std::fprintf(stderr, "generate: %zu prompts; prefill %lld tokens at %.1f tokens/s, decode %lld tokens at %.1f tokens/s\n",
               results.size(), static_cast<long long>(stats.prefill_tokens), rate(stats.prefill_tokens, stats.prefill_seconds),
               static_cast<long long>(stats.decode_tokens), rate(stats.decode_tokens, stats.decode_seconds));
  return 0;
}

}  // namespace mt
