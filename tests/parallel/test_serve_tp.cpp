// The server under tensor parallelism (tp = 2, one group per pair of ranks): the group's first
// rank serves over loopback and the second follows its broadcasts. Concurrent clients (Megatron's
// API, OpenAI completions whole and streamed, greedy and seeded sampling) get exactly the tokens
// the single-rank Generator makes; a request cancelled mid-generation leaves both ranks in step
// (the requests after it still match); and the drain ends the follower too.
#include <httplib.h>

#include <atomic>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/tokenizer_null.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "parallel_testing.h"
#include "serve/http_server.h"

namespace mt::test {
namespace {

using json = nlohmann::json;

constexpr int64_t kVocab = 300;

ModelConfig model(int tp) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.seq_length = 256;
  m.vocab_size = kVocab;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbedding::rope;
  m.activation = Activation::swiglu;
  m.add_bias_linear = false;
  m.hidden_dropout = m.attention_dropout = 0.0f;
  m.tensor_model_parallel_size = tp;
  m.finalize();
  return m;
}

std::unique_ptr<InferenceEngine> engine(int tp, Communicator* comm) {
  EngineOptions o;
  o.slots = 3;
  o.max_step_tokens = 32;
  o.tp_comm = comm;
  auto e = std::make_unique<InferenceEngine>(model(tp), cpu_backend(), nullptr, o);
  e->params().init(9);
  return e;
}

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int kind;  // 0: PUT /api, 1: POST /v1/completions, 2: streamed
};

// The generated tokens a client receives for one case.
std::vector<int32_t> ask(httplib::Client& c, const Case& k, int64_t tokens) {
  const std::string prompt = ids_text(k.prompt);
  if (k.kind == 0) {
    json body = {{"prompts", {prompt}}, {"tokens_to_generate", tokens}, {"top_k", k.sampling.top_k},
                 {"temperature", k.sampling.temperature}, {"random_seed", k.sampling.seed}};
    const auto r = c.Put("/api", body.dump(), "application/json");
    if (!r || r->status != 200) return {-1};
    std::vector<int32_t> all = text_ids(json::parse(r->body).at("text")[0]);
    return std::vector<int32_t>(all.begin() + static_cast<std::ptrdiff_t>(k.prompt.size()), all.end());
  }
  json body = {{"prompt", prompt}, {"max_tokens", tokens}, {"top_k", k.sampling.top_k},
               {"temperature", k.sampling.temperature}, {"seed", k.sampling.seed}, {"stream", k.kind == 2}};
  const auto r = c.Post("/v1/completions", body.dump(), "application/json");
  if (!r || r->status != 200) return {-1};
  if (k.kind == 1) return text_ids(json::parse(r->body).at("choices")[0].at("text"));
  std::string text;
  std::istringstream events(r->body);
  for (std::string line; std::getline(events, line);)
    if (line.rfind("data: {", 0) == 0) text += json::parse(line.substr(6)).at("choices")[0].at("text").get<std::string>();
  return text_ids(text);
}

TEST(ServeTp, TheGroupsFirstRankServesAndTheOtherFollows) {
  std::unique_ptr<Communicator> tp = world().split(world().rank() / 2, world().rank());
  auto sharded = engine(2, tp.get());
  NullTokenizer tokenizer(kVocab);
  Generator generator(*sharded, /*eod=*/-1);  // only lengths (and the cancellation) end requests
  GenerationService service(generator, tokenizer, tp.get(), 64);
  if (tp->rank() != 0) {
    service.follow();  // returns when the first rank drains
    return;
  }
  ServerOptions options;
  options.port = 0;
  HttpServer server(service, options);
  const int port = server.start();
  std::atomic<bool> stop{false};
  std::thread loop([&] { service.run(stop); });

  // A long streamed request that its client leaves after the first pieces.
  std::thread leaver([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120);
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.body = json{{"prompt", "1 2 3"}, {"max_tokens", 250}, {"stream", true}}.dump();
    int pieces = 0;
    request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++pieces < 3; };
    c.send(request);
  });
  const int64_t kTokens = 12;
  std::vector<Case> cases;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt;
    for (int k = 0; k <= i * 3; ++k) prompt.push_back(static_cast<int32_t>((i * 31 + k * 7 + 1) % (kVocab - 1)));
    const SamplingParams sampling = i % 2 ? SamplingParams{0.9f, 40, 0.0f, static_cast<uint64_t>(100 + i)}
                                          : SamplingParams{1.0f, 1, 0.0f, 0};
    cases.push_back({prompt, sampling, i % 3});
  }
  std::vector<std::vector<int32_t>> received(cases.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < cases.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(120);
      received[i] = ask(c, cases[i], kTokens);
    });
  for (std::thread& t : clients) t.join();
  leaver.join();
  stop = true;
  loop.join();
  server.stop();

  EXPECT_EQ(service.cancelled_jobs(), 1);
  auto single = engine(1, nullptr);
  Generator reference(*single, -1);
  for (size_t i = 0; i < cases.size(); ++i) {
    GenerationRequest r;
    r.prompt = cases[i].prompt;
    r.tokens_to_generate = kTokens;
    r.sampling = cases[i].sampling;
    EXPECT_EQ(received[i], reference.run({r})[0].tokens) << "case " << i << " (kind " << cases[i].kind << ")";
  }
}

}  // namespace
}  // namespace mt::test
