// The server over loopback (serve/): each endpoint's answer has its schema and the tokens the
// Generator makes alone (greedy and seeded sampling, so serve answers as generate does); streamed
// answers parse as server-sent events and add up to the whole answer; a table of bad requests each
// gets its 4xx and a JSON error naming the field; 32 concurrent clients all complete; a client that
// leaves mid-stream frees its slot; a drain finishes the admitted requests; and the megatron binary
// itself serves, drains on SIGTERM and exits 0.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "data/tokenizer_null.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "serve/chat_prompt.h"
#include "serve/http_server.h"
#include "testing.h"

namespace mt {
namespace {

using json = nlohmann::json;
using test::ids_text;
using test::text_ids;

constexpr int64_t kVocab = 200;  // NullTokenizer: EOD 199

ModelConfig tiny_model() {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 32;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.seq_length = 64;
  m.max_position_embeddings = 64;
  m.vocab_size = kVocab;
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbedding::rope;
  m.activation = Activation::swiglu;
  m.hidden_dropout = m.attention_dropout = 0.0f;
  m.finalize();
  return m;
}

std::unique_ptr<InferenceEngine> tiny_engine(int64_t slots, int64_t max_len = 64) {
  EngineOptions o;
  o.slots = slots;
  o.max_sequence_length = max_len;
  o.max_step_tokens = 64;
  ModelConfig m = tiny_model();
  m.max_position_embeddings = std::max<int64_t>(64, max_len);
  auto engine = std::make_unique<InferenceEngine>(m, cpu_backend(), nullptr, o);
  engine->params().init(5);
  return engine;
}

// What the Generator makes for these prompts alone (eod 199 unless given).
std::vector<GenerationResult> reference(const std::vector<std::vector<int32_t>>& prompts, int64_t tokens,
                                        const SamplingParams& sampling, bool log_probs = false) {
  auto engine = tiny_engine(2);
  Generator generator(*engine, kVocab - 1);
  std::vector<GenerationRequest> requests;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt = p;
    r.tokens_to_generate = tokens;
    r.sampling = sampling;
    r.log_probs = log_probs;
    requests.push_back(r);
  }
  return generator.run(requests);
}

// A server on a free loopback port over a tiny model with random weights.
class Server {
 public:
  explicit Server(ServerOptions options = {}, int64_t slots = 4, int64_t eod = kVocab - 1, int64_t max_len = 64)
      : tokenizer_(kVocab), engine_(tiny_engine(slots, max_len)), generator_(*engine_, eod),
        service_(generator_, tokenizer_, nullptr, options.max_concurrent) {
    options.port = 0;
    http_ = std::make_unique<HttpServer>(service_, options);
    port_ = http_->start();
    loop_ = std::thread([this] { service_.run(stop_); });
  }
  ~Server() {
    drain();
    http_->stop();
  }
  // Stops the loop the way SIGTERM does and waits for it to end.
  void drain() {
    stop_ = true;
    if (loop_.joinable()) loop_.join();
  }
  GenerationService& service() { return service_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60);
    return c;
  }

 private:
  NullTokenizer tokenizer_;
  std::unique_ptr<InferenceEngine> engine_;
  Generator generator_;
  GenerationService service_;
  std::unique_ptr<HttpServer> http_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

json body_of(const httplib::Result& r) {
  EXPECT_TRUE(r) << "no response: " << httplib::to_string(r.error());
  if (!r) return json();
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << r->body;
  return json::parse(r->body);
}

const std::vector<std::vector<int32_t>> kPrompts = {{3, 14, 15, 92, 65}, {2, 71}, {8, 28, 18, 28, 45, 90, 45, 23}};

TEST(ServeHttp, HealthAndModels) {
  ServerOptions o;
  o.model_name = "tiny";
  Server server(o);
  auto c = server.client();
  const json health = body_of(c.Get("/health"));
  EXPECT_EQ(health.at("status"), "ok");
  EXPECT_EQ(health.at("active_requests"), 0);
  const json models = body_of(c.Get("/v1/models"));
  EXPECT_EQ(models.at("data").at(0).at("id"), "tiny");
  EXPECT_TRUE(models.at("data").at(0).at("created").is_number_integer());
  EXPECT_EQ(body_of(c.Get("/v1/models/tiny")), models.at("data").at(0));
  const auto other = c.Get("/v1/models/gpt-4");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(json::parse(other->body).at("error").at("param"), "model");
}

TEST(ServeHttp, MegatronApiAnswersAsTheGeneratorAlone) {
  Server server;
  auto c = server.client();
  json prompts = json::array();
  for (const auto& p : kPrompts) prompts.push_back(ids_text(p));
  const auto r = c.Put("/api", json{{"prompts", prompts}, {"tokens_to_generate", 6}, {"top_k", 1}, {"logprobs", true}}.dump(),
                       "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = body_of(r);
  const auto expected = reference(kPrompts, 6, SamplingParams{1.0f, 1, 0.0f, 0}, true);
  ASSERT_EQ(body.at("text").size(), kPrompts.size());
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    std::vector<int32_t> sequence = kPrompts[i];
    sequence.insert(sequence.end(), expected[i].tokens.begin(), expected[i].tokens.end());
    // Megatron's text, tokens and segments hold the prompt and the generation.
    EXPECT_EQ(text_ids(body.at("text")[i]), sequence) << i;
    EXPECT_EQ(body.at("tokens")[i].get<std::vector<int32_t>>(), sequence) << i;
    ASSERT_EQ(body.at("segments")[i].size(), sequence.size());
    EXPECT_EQ(body.at("segments")[i].back(), std::to_string(sequence.back()));
    const std::vector<float> logprobs = body.at("logprobs")[i].get<std::vector<float>>();
    ASSERT_EQ(logprobs.size(), sequence.size() - 1);
    for (size_t k = 0; k + 1 < kPrompts[i].size(); ++k) EXPECT_FLOAT_EQ(logprobs[k], expected[i].prompt_log_probs[k]);
    EXPECT_FLOAT_EQ(logprobs.back(), expected[i].log_probs.back());
  }
}

TEST(ServeHttp, OpenAiCompletionHasTheSchemaAndTheGeneratorsTokens) {
  Server server;
  auto c = server.client();
  for (const char* path : {"/v1/completions", "/completions"}) {
    const json request = {{"prompt", json{kPrompts[0], kPrompts[1]}}, {"max_tokens", 5}, {"temperature", 0},
                          {"logprobs", 2},                            {"model", "mine"}};
    const json body = body_of(c.Post(path, request.dump(), "application/json"));
    EXPECT_EQ(body.at("object"), "text_completion");
    EXPECT_EQ(body.at("model"), "mine");
    EXPECT_TRUE(body.at("id").is_string() && body.at("created").is_number_integer());
    const auto expected = reference({kPrompts[0], kPrompts[1]}, 5, SamplingParams{1.0f, 1, 0.0f, 0});
    ASSERT_EQ(body.at("choices").size(), 2u);
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < 2; ++i) {
      const json& choice = body.at("choices")[i];
      EXPECT_EQ(choice.at("index"), i);
      std::vector<int32_t> tokens = expected[i].tokens;
      if (expected[i].finish_reason == "eod") tokens.pop_back();
      EXPECT_EQ(text_ids(choice.at("text")), tokens);
      EXPECT_EQ(choice.at("finish_reason"), expected[i].finish_reason == "length" ? "length" : "stop");
      const json& lp = choice.at("logprobs");
      ASSERT_EQ(lp.at("tokens").size(), tokens.size());
      ASSERT_EQ(lp.at("top_logprobs").size(), tokens.size());
      EXPECT_EQ(lp.at("top_logprobs")[0].size(), 2u);
      EXPECT_EQ(lp.at("text_offset").size(), tokens.size());
      // Greedy: the chosen token is the most likely one.
      EXPECT_FLOAT_EQ(lp.at("token_logprobs")[0].get<float>(), lp.at("top_logprobs")[0].at(lp.at("tokens")[0].get<std::string>()).get<float>());
      completion_tokens += static_cast<int64_t>(expected[i].tokens.size());
    }
    EXPECT_EQ(body.at("usage").at("prompt_tokens"), 7);
    EXPECT_EQ(body.at("usage").at("completion_tokens"), completion_tokens);
    EXPECT_EQ(body.at("usage").at("total_tokens"), 7 + completion_tokens);
  }
}

TEST(ServeHttp, SeededSamplingIsTheGeneratorsAndRepeats) {
  Server server;
  auto c = server.client();
  json prompts = json::array();
  for (const auto& p : kPrompts) prompts.push_back(ids_text(p));
  const json request = {{"prompt", prompts}, {"max_tokens", 8}, {"temperature", 0.8}, {"top_k", 20}, {"seed", 7}};
  const json first = body_of(c.Post("/v1/completions", request.dump(), "application/json"));
  const json second = body_of(c.Post("/v1/completions", request.dump(), "application/json"));
  const auto expected = reference(kPrompts, 8, SamplingParams{0.8f, 20, 0.0f, 7});
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    std::vector<int32_t> tokens = expected[i].tokens;
    if (expected[i].finish_reason == "eod") tokens.pop_back();
    EXPECT_EQ(text_ids(first.at("choices")[i].at("text")), tokens) << i;
    EXPECT_EQ(first.at("choices")[i].at("text"), second.at("choices")[i].at("text")) << i;
  }
  // Megatron's API: random_seed, top_p sampling.
  const json api = {{"prompts", prompts}, {"tokens_to_generate", 8}, {"temperature", 0.9}, {"top_p", 0.8}, {"random_seed", 11}};
  const json a = body_of(c.Put("/api", api.dump(), "application/json"));
  const auto nucleus = reference(kPrompts, 8, SamplingParams{0.9f, 0, 0.8f, 11});
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    std::vector<int32_t> sequence = kPrompts[i];
    sequence.insert(sequence.end(), nucleus[i].tokens.begin(), nucleus[i].tokens.end());
    EXPECT_EQ(text_ids(a.at("text")[i]), sequence) << i;
  }
}

// The events of a server-sent event stream: each "data: ...\n\n".
std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event is not ended by a blank line";
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    events.push_back(event.substr(6));
    at = end + 2;
  }
  return events;
}

TEST(ServeHttp, StreamedCompletionParsesAsEventsAndAddsUpToTheWholeAnswer) {
  Server server;
  auto c = server.client();
  json request = {{"prompt", json{kPrompts[0], kPrompts[2]}}, {"max_tokens", 12}, {"temperature", 0.7},
                  {"seed", 3},                                {"echo", true},     {"stop", "1"}};
  const json whole = body_of(c.Post("/v1/completions", request.dump(), "application/json"));
  request["stream"] = true;
  const auto r = c.Post("/v1/completions", request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> text(2);
  std::vector<int> finishes(2, 0);
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const json chunk = json::parse(events[e]);
    EXPECT_EQ(chunk.at("object"), "text_completion");
    const json& choice = chunk.at("choices").at(0);
    const size_t i = choice.at("index");
    EXPECT_EQ(finishes[i], 0) << "text after the finish of choice " << i;
    text[i] += choice.at("text").get<std::string>();
    if (!choice.at("finish_reason").is_null()) {
      ++finishes[i];
      EXPECT_EQ(choice.at("finish_reason"), whole.at("choices")[i].at("finish_reason"));
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(finishes[i], 1);
    EXPECT_EQ(text[i], whole.at("choices")[i].at("text")) << i;
  }
  // stream_options.include_usage: one more chunk, without choices, with the whole answer's usage.
  request["stream_options"] = {{"include_usage", true}};
  const auto with_usage = c.Post("/v1/completions", request.dump(), "application/json");
  ASSERT_TRUE(with_usage);
  const std::vector<std::string> more = sse_events(with_usage->body);
  ASSERT_GE(more.size(), 2u);
  const json usage = json::parse(more[more.size() - 2]);
  EXPECT_TRUE(usage.at("choices").empty());
  EXPECT_EQ(usage.at("usage"), whole.at("usage"));
}

// A chat template for the NullTokenizer: the messages' ids, one after the other.
constexpr const char* kIdsTemplate = "{% for m in messages %}{{ m.content }} {% endfor %}";

TEST(ServeHttp, ChatCompletionIsTheTemplatedPromptsGeneration) {
  ServerOptions o;
  o.chat_template = kIdsTemplate;
  Server server(o);
  auto c = server.client();
  const json request = {{"messages", {{{"role", "system"}, {"content", ids_text({3, 14})}},
                                      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", ids_text({15, 92, 65})}}}}}}},
                        {"max_completion_tokens", 6}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2},
                        {"model", "mine"}};
  for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
    const json body = body_of(c.Post(path, request.dump(), "application/json"));
    EXPECT_EQ(body.at("object"), "chat.completion");
    EXPECT_EQ(body.at("model"), "mine");
    EXPECT_EQ(body.at("id").get<std::string>().rfind("chatcmpl-", 0), 0u);
    EXPECT_TRUE(body.at("created").is_number_integer());
    const auto expected = reference({kPrompts[0]}, 6, SamplingParams{1.0f, 1, 0.0f, 0})[0];
    std::vector<int32_t> tokens = expected.tokens;
    if (expected.finish_reason == "eod") tokens.pop_back();
    const json& choice = body.at("choices").at(0);
    EXPECT_EQ(choice.at("message").at("role"), "assistant");
    EXPECT_EQ(text_ids(choice.at("message").at("content")), tokens);
    EXPECT_EQ(choice.at("finish_reason"), expected.finish_reason == "length" ? "length" : "stop");
    const json& content = choice.at("logprobs").at("content");
    ASSERT_EQ(content.size(), tokens.size());
    EXPECT_EQ(content[0].at("top_logprobs").size(), 2u);
    EXPECT_FLOAT_EQ(content[0].at("logprob").get<float>(), content[0].at("top_logprobs")[0].at("logprob").get<float>());
    EXPECT_EQ(body.at("usage").at("prompt_tokens"), 5);
    EXPECT_EQ(body.at("usage").at("completion_tokens"), static_cast<int64_t>(expected.tokens.size()));
  }
}

TEST(ServeHttp, StreamedChatAddsUpToTheWholeAnswerAndEndsWithTheUsage) {
  ServerOptions o;
  o.chat_template = kIdsTemplate;
  Server server(o);
  auto c = server.client();
  json request = {{"messages", {{{"role", "user"}, {"content", ids_text(kPrompts[2])}}}},
                  {"max_tokens", 10}, {"temperature", 0.7}, {"seed", 4}};
  const json whole = body_of(c.Post("/v1/chat/completions", request.dump(), "application/json"));
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  const auto r = c.Post("/v1/chat/completions", request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::vector<std::string> events = sse_events(r->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events[0]);
  EXPECT_EQ(first.at("object"), "chat.completion.chunk");
  EXPECT_EQ(first.at("choices")[0].at("delta").at("role"), "assistant");
  std::string text;
  int finishes = 0;
  for (size_t e = 0; e + 2 < events.size(); ++e) {
    const json choice = json::parse(events[e]).at("choices").at(0);
    EXPECT_EQ(finishes, 0) << "a delta after the finish";
    if (choice.at("delta").contains("content")) text += choice.at("delta").at("content").get<std::string>();
    if (!choice.at("finish_reason").is_null()) {
      ++finishes;
      EXPECT_EQ(choice.at("finish_reason"), whole.at("choices")[0].at("finish_reason"));
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, whole.at("choices")[0].at("message").at("content"));
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage.at("choices").empty());
  EXPECT_EQ(usage.at("usage"), whole.at("usage"));
}

TEST(ServeHttp, AChatTemplatesExceptionIsA400WithItsMessage) {
  ServerOptions o;
  o.chat_template = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}1";
  Server server(o);
  const auto r = server.client().Post(
      "/v1/chat/completions", json{{"messages", {{{"role", "system"}, {"content", "2"}}}}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("System role not supported"), std::string::npos) << r->body;
}

// A NullTokenizer with a BOS (5): the chat prompt drops the template's leading BOS, as Megatron's
// chat endpoint does, unless the request asks for add_BOS.
class NullWithBos : public NullTokenizer {
 public:
  NullWithBos() : NullTokenizer(kVocab) {}
  std::optional<int64_t> bos() const override { return 5; }
};

TEST(ServeChat, LeadingBosIsDroppedAndAddBosPutsOneBack) {
  NullWithBos tokenizer;
  auto engine = tiny_engine(2);
  Generator generator(*engine, kVocab - 1);
  GenerationService service(generator, tokenizer, nullptr, 8);
  const ChatPrompt prompt(service, "{{ bos_token }} {{ bos_token }} {% for m in messages %}{{ m.content }} {% endfor %}");
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "7 8"}}};
  EXPECT_EQ(prompt.tokens(messages), (std::vector<int32_t>{7, 8}));
  EXPECT_THROW(ChatPrompt(service, "").tokens(messages), RequestError);  // no template anywhere
}

TEST(ServeHttp, LogprobsCoverTheTextAStopStringLeaves) {
  Server server;
  const auto greedy = reference({kPrompts[2]}, 8, SamplingParams{1.0f, 1, 0.0f, 0})[0].tokens;
  // A stop string that first occurs where generated token k's text starts: the text keeps k tokens.
  const std::string all = ids_text(greedy);
  std::string stop;
  std::vector<int32_t> kept;
  for (size_t k = 1; k < greedy.size() && stop.empty(); ++k) {
    const std::string before = ids_text(std::vector<int32_t>(greedy.begin(), greedy.begin() + k));
    const std::string candidate = " " + std::to_string(greedy[k]);
    if (all.find(candidate) == before.size()) {
      stop = candidate;
      kept.assign(greedy.begin(), greedy.begin() + k);
    }
  }
  if (stop.empty()) GTEST_SKIP() << "every generated token repeats an earlier one";
  const json body = body_of(server.client().Post(
      "/v1/completions",
      json{{"prompt", kPrompts[2]}, {"max_tokens", 8}, {"temperature", 0}, {"stop", stop}, {"logprobs", 0}}.dump(),
      "application/json"));
  const json& choice = body.at("choices")[0];
  EXPECT_EQ(choice.at("finish_reason"), "stop");
  EXPECT_EQ(choice.at("text"), ids_text(kept));
  EXPECT_EQ(choice.at("logprobs").at("tokens").size(), kept.size());
}

// A tokenizer whose decode fails: the stop check inside the generation loop throws.
class FailingDecode : public NullTokenizer {
 public:
  FailingDecode() : NullTokenizer(kVocab) {}
  std::string decode(std::span<const int32_t>) const override { MT_FAIL() << "decode failed"; }
};

TEST(ServeHttp, AFailedStepEndsEveryRequestWith500AndStopsTheLoop) {
  FailingDecode tokenizer;
  auto engine = tiny_engine(2);
  Generator generator(*engine, kVocab - 1);
  GenerationService service(generator, tokenizer, nullptr, 8);
  ServerOptions o;
  o.port = 0;
  HttpServer http(service, o);
  const int port = http.start();
  std::atomic<bool> stop{false};
  std::string loop_error;
  std::thread loop([&] {
    try {
      service.run(stop);
    } catch (const std::exception& e) {
      loop_error = e.what();
    }
  });
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  const auto r = c.Post("/v1/completions", json{{"prompt", "1 2"}, {"max_tokens", 4}, {"stop", "x"}}.dump(), "application/json");
  loop.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500) << r->body;
  EXPECT_NE(json::parse(r->body).at("error").at("message").get<std::string>().find("decode failed"), std::string::npos);
  EXPECT_NE(loop_error.find("decode failed"), std::string::npos);
  EXPECT_TRUE(service.draining());
  http.stop();
}

struct BadRequest {
  const char* name;
  const char* method;
  const char* path;
  std::string body;
  int status;
  const char* param;  // "" when the error names no field
};

TEST(ServeHttp, BadRequestsGetTheirStatusAndAJsonErrorNamingTheField) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  o.limits.max_prompts = 4;
  Server server(o);
  const std::vector<BadRequest> table = {
      {"malformed JSON", "PUT", "/api", "{\"prompts\": [\"1 2\"", 400, ""},
      {"not an object", "POST", "/v1/completions", "[1, 2]", 400, ""},
      {"prompts of the wrong type", "PUT", "/api", R"({"prompts": "1 2"})", 400, "prompts"},
      {"tokens of the wrong type", "PUT", "/api", R"({"prompts": ["1 2"], "tokens_to_generate": "5"})", 400, "tokens_to_generate"},
      {"temperature out of range", "PUT", "/api", R"({"prompts": ["1 2"], "temperature": 0})", 400, "temperature"},
      {"top_k out of range", "PUT", "/api", R"({"prompts": ["1 2"], "top_k": 1001})", 400, "top_k"},
      {"top_k with top_p", "PUT", "/api", R"({"prompts": ["1 2"], "top_k": 5, "top_p": 0.5})", 400, "top_p"},
      {"renamed field", "PUT", "/api", R"({"prompts": ["1 2"], "max_len": 5})", 400, "max_len"},
      {"unknown field", "POST", "/v1/completions", R"({"prompt": "1 2", "beams": 5})", 400, "beams"},
      {"max_tokens negative", "POST", "/v1/completions", R"({"prompt": "1 2", "max_tokens": -1})", 400, "max_tokens"},
      {"logprobs too many", "POST", "/v1/completions", R"({"prompt": "1 2", "logprobs": 21})", 400, "logprobs"},
      {"n above one", "POST", "/v1/completions", R"({"prompt": "1 2", "n": 2})", 400, "n"},
      {"too many prompts", "PUT", "/api", R"({"prompts": ["1", "2", "3", "4", "5"]})", 400, "prompts"},
      {"empty prompt", "POST", "/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"empty prompt list", "PUT", "/api", R"({"prompts": []})", 400, "prompts"},
      {"prompt the tokenizer cannot read", "POST", "/v1/completions", R"({"prompt": "one two"})", 400, "prompt"},
      {"token id beyond the vocabulary", "POST", "/v1/completions", R"({"prompt": [1, 200]})", 400, "prompt"},
      {"longer than a sequence may be", "PUT", "/api", R"({"prompts": ["1 2 3"], "tokens_to_generate": 62})", 400, "prompts"},
      {"a token count that would overflow", "PUT", "/api",
       R"({"prompts": ["1 2 3"], "tokens_to_generate": 9223372036854775807})", 400, "prompts"},
      {"oversized body", "POST", "/v1/completions", "{\"prompt\": \"" + std::string(5000, '1') + "\"}", 413, ""},
      {"unknown endpoint", "POST", "/v1/embeddings", "{}", 404, ""},
      {"chat without messages", "POST", "/v1/chat/completions", "{}", 400, "messages"},
      {"chat without a template", "POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "1"}]})", 400, "messages"},
      {"chat with tools", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "1"}], "tools": [{"type": "function"}]})", 400, "tools"},
      {"chat with an image", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})", 400, "messages"},
      {"chat top_logprobs without logprobs", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "1"}], "top_logprobs": 2})", 400, "top_logprobs"},
      {"chat ignoring EOS", "POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "1"}], "ignore_eos": true})", 400, "ignore_eos"},
      {"wrong method", "GET", "/api", "", 405, ""},
      {"wrong method for completions", "PUT", "/v1/completions", "{}", 405, ""},
  };
  auto c = server.client();
  for (const BadRequest& b : table) {
    SCOPED_TRACE(b.name);
    httplib::Result r = std::string(b.method) == "GET" ? c.Get(b.path)
                        : std::string(b.method) == "PUT" ? c.Put(b.path, b.body, "application/json")
                                                         : c.Post(b.path, b.body, "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, b.status) << r->body;
    const json body = body_of(r);
    ASSERT_TRUE(body.contains("error")) << r->body;
    EXPECT_FALSE(body.at("error").at("message").get<std::string>().empty());
    EXPECT_EQ(body.at("message"), body.at("error").at("message"));  // Megatron's CLI reads it there
    EXPECT_EQ(body.at("error").at("code"), b.status);
    if (*b.param)
      EXPECT_EQ(body.at("error").at("param"), b.param) << r->body;
    else
      EXPECT_TRUE(body.at("error").at("param").is_null()) << r->body;
  }
  // And the server is still up.
  EXPECT_EQ(body_of(c.Get("/health")).at("status"), "ok");
}

TEST(ServeHttp, ThirtyTwoConcurrentClientsAllComplete) {
  Server server;  // 4 cache slots: requests wait their turn
  constexpr int kClients = 32, kRequests = 4;
  std::atomic<int> ok{0};
  std::vector<std::string> failures(kClients);
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k)
    clients.emplace_back([&, k] {
      auto c = server.client();
      for (int q = 0; q < kRequests; ++q) {
        const std::string prompt = ids_text({static_cast<int32_t>(k + 1), static_cast<int32_t>(q + 1), 7});
        const auto send = [&]() {
          switch ((k + q) % 3) {
            case 0:
              return c.Put("/api", json{{"prompts", {prompt}}, {"tokens_to_generate", 8}, {"top_k", 1}}.dump(),
                           "application/json");
            case 1:
              return c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 8}, {"seed", k}}.dump(),
                            "application/json");
            default:
              return c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 8}, {"stream", true}}.dump(),
                            "application/json");
          }
        };
        const httplib::Result r = send();
        if (r && r->status == 200)
          ++ok;
        else
          failures[k] += "request " + std::to_string(q) + " kind " + std::to_string((k + q) % 3) + ": " + (r ? std::to_string(r->status) + " " + r->body : httplib::to_string(r.error())) + "; ";
      }
    });
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients * kRequests);
  for (const std::string& f : failures) EXPECT_EQ(f, "");
  EXPECT_EQ(body_of(server.client().Get("/health")).at("active_requests"), 0);
}

TEST(ServeHttp, AClientThatLeavesMidStreamFreesItsSlot) {
  // No EOD and room for long sequences: only the cancellation can end the request early.
  Server server(ServerOptions{}, 1, /*eod=*/-1, /*max_len=*/1024);
  auto c = server.client();
  int chunks = 0;
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = json{{"prompt", "1 2 3"}, {"max_tokens", 1000}, {"stream", true}}.dump();
  request.set_header("Content-Type", "application/json");
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
  c.send(request);  // ends with the receiver's refusal after two pieces
  EXPECT_GE(chunks, 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (server.service().active_jobs() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server.service().active_jobs(), 0);
  EXPECT_EQ(server.service().cancelled_jobs(), 1);
  // The one slot is free again.
  const auto r = c.Post("/v1/completions", json{{"prompt", "4 5"}, {"max_tokens", 3}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServeService, TooManyJobsGet429AndADrainingServiceGets503) {
  NullTokenizer tokenizer(kVocab);
  auto engine = tiny_engine(1);
  Generator generator(*engine, kVocab - 1);
  GenerationService service(generator, tokenizer, nullptr, 1);
  JobSequence s;
  s.request.prompt = {1, 2};
  s.request.tokens_to_generate = 3;
  const std::shared_ptr<Job> first = service.submit({s});
  try {
    service.submit({s});
    ADD_FAILURE() << "a second job was admitted beyond max_jobs 1";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 429);
  }
  const std::atomic<bool> stop{true};
  service.run(stop);  // drains: the admitted job finishes first
  ASSERT_TRUE(first->done());
  EXPECT_EQ(first->results()[0].tokens.size(), 3u);
  try {
    service.submit({s});
    ADD_FAILURE() << "a draining service admitted a job";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 503);
  }
}

TEST(ServeHttp, ADrainFinishesTheAdmittedRequests) {
  auto server = std::make_unique<Server>(ServerOptions{}, 2, /*eod=*/-1, /*max_len=*/512);
  std::optional<httplib::Result> answer;
  std::thread client([&] {
    auto c = server->client();
    answer = c.Post("/v1/completions", json{{"prompt", "1 2 3"}, {"max_tokens", 400}}.dump(), "application/json");
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (server->service().active_jobs() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server->drain();  // returns once the admitted request is done
  EXPECT_TRUE(server->service().draining());
  client.join();
  ASSERT_TRUE(answer && *answer);
  ASSERT_EQ((*answer)->status, 200);
  const json body = json::parse((*answer)->body);
  EXPECT_EQ(body.at("usage").at("completion_tokens"), 400);
  EXPECT_EQ(body.at("choices")[0].at("finish_reason"), "length");
  const auto late = server->client().Post("/v1/completions", json{{"prompt", "1"}}.dump(), "application/json");
  ASSERT_TRUE(late);
  EXPECT_EQ(late->status, 503);
}

// The binary: `megatron serve` over a checkpoint that `megatron train` saved, ended by SIGTERM.
TEST(ServeBinary, ServesACheckpointAndExitsCleanlyOnSigterm) {
  test::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  ASSERT_EQ(cmd_train({"--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
                       "--max-position-embeddings", "256", "--micro-batch-size", "2", "--global-batch-size", "2",
                       "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "100", "--lr", "1e-3",
                       "--train-iters", "2", "--log-interval", "1", "--eval-iters", "0", "--save", ckpt}),
            0);
  const std::string log = dir.file("serve.log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    execl(MT_MEGATRON_BINARY, "megatron", "serve", "--load", ckpt.c_str(), "--port", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  // The port it chose, from its log line.
  int port = 0;
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::smatch m;
    const std::string text = test::read_bytes(log);
    if (std::regex_search(text, m, std::regex("listening on http://127\\.0\\.0\\.1:(\\d+)"))) port = std::stoi(m[1]);
  }
  ASSERT_GT(port, 0) << test::read_bytes(log);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  const auto r = c.Put("/api", json{{"prompts", {"5 6 7"}}, {"tokens_to_generate", 4}, {"top_k", 1}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  // SIGTERM while a long request runs: it still completes, then the process exits 0.
  std::optional<httplib::Result> answer;
  std::thread client([&] {
    httplib::Client c2("127.0.0.1", port);
    c2.set_read_timeout(60);
    answer = c2.Put("/api", json{{"prompts", {"5 6 7"}}, {"tokens_to_generate", 200}, {"stop_token", 0}, {"top_k", 1}}.dump(),
                    "application/json");
  });
  // Up to 10 s for the request to start (a loaded CI machine can take a while): SIGTERM must come
  // while it runs.
  for (int i = 0; i < 10000 && body_of(c.Get("/health")).value("active_requests", 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  kill(pid, SIGTERM);
  client.join();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::read_bytes(log);
  ASSERT_TRUE(answer && *answer);
  EXPECT_EQ((*answer)->status, 200) << (*answer)->body;
  EXPECT_NE(test::read_bytes(log).find("serve: stopped"), std::string::npos);
}

}  // namespace
}  // namespace mt
