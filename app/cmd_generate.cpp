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
#include "app/inference_setup.h"
#include "app/options.h"
#include "base/error.h"
#include "ckpt/checkpoint_dir.h"
#include "infer/generate.h"
#include "serve/responses.h"

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

}  // namespace

int cmd_generate(const std::vector<std::string>& args, Communicator* world) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("generate").c_str(), stdout);
      return 0;
    }
  const Options o = parse_options("generate", args);
  const int rank = world ? world->rank() : 0;
  const std::unique_ptr<InferenceSetup> setup = open_for_inference(o, world);
  const Tokenizer& tokenizer = *setup->tokenizer;

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
    r.prompt = tokenizer.encode(p);
    MT_CHECK(!r.prompt.empty()) << "the prompt \"" << p << "\" has no tokens";
    r.tokens_to_generate = o.integer("--num-tokens-to-generate");
    r.sampling = sampling;
    r.log_probs = o.flag("--return-log-probs");
    r.top_n_log_probs = o.integer("--top-n-logprobs");
    longest = std::max(longest, static_cast<int64_t>(r.prompt.size()) + r.tokens_to_generate);
    requests.push_back(std::move(r));
  }

  setup->load_engine(o, world, std::min<int64_t>(o.integer("--inference-max-requests"), requests.size()), longest);
  Generator generator(*setup->engine, tokenizer.eod());
  const StopCheck stop = [&](size_t, const std::vector<int32_t>& generated) {
    if (stop_words.empty()) return false;
    bool cut = false;
    cut_at_stop(tokenizer.decode(generated), stop_words, &cut);
    return cut;
  };
  GenerationStats stats;
  const std::vector<GenerationResult> results = generator.run(requests, stop, &stats);
  if (rank != 0) return 0;

  std::string lines;
  for (size_t i = 0; i < results.size(); ++i) {
    const GenerationResult& r = results[i];
    // The text ends before an EOD that ended the generation (its id stays in generated_tokens).
    const size_t shown = r.tokens.size() - (r.finish_reason == "eod" ? 1 : 0);
    const std::string text = cut_at_stop(
        tokenizer.decode_continuation(requests[i].prompt, std::span<const int32_t>(r.tokens.data(), shown)), stop_words);
    std::printf("prompt %zu: %s\ngenerated: %s\n\n", i, prompts[i].c_str(), text.c_str());
    nlohmann::json line = {{"prompt", prompts[i]}, {"generated_text", text}, {"generated_tokens", r.tokens},
                           {"finish_reason", r.finish_reason}};
    if (requests[i].log_probs) line["logprobs"] = {{"prompt", r.prompt_log_probs}, {"generated", r.log_probs}};
    if (requests[i].top_n_log_probs > 0) line["top_n_logprobs"] = r.top_log_probs;
    lines += dump_json(line) + "\n";  // bad UTF-8 (a token cut mid-character) is replaced, never thrown
  }
  if (o.has("--output-path")) write_file_atomically(o.text("--output-path"), lines);
  const auto rate = [](int64_t tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; };
  std::fprintf(stderr, "generate: %zu prompts; prefill %lld tokens at %.1f tokens/s, decode %lld tokens at %.1f tokens/s\n",
               results.size(), static_cast<long long>(stats.prefill_tokens), rate(stats.prefill_tokens, stats.prefill_seconds),
               static_cast<long long>(stats.decode_tokens), rate(stats.decode_tokens, stats.decode_seconds));
  return 0;
}

}  // namespace mt
