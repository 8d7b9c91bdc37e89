// serve/requests.h and the pure text helpers of serve/responses.h. Megatron's PUT /api against
// megatron/inference/text_generation_server.py (its defaults, its checks in its order, its exact
// messages); OpenAI's POST /v1/completions against OpenAI's documented fields and defaults; the
// streamed text's hold-back (a tail that may begin a stop string, an unfinished UTF-8 character);
// OpenAI's POST /v1/chat/completions (fields, defaults, content parts, key order, refusals); JSON
// that replaces bad UTF-8 instead of throwing; the error body's shape.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/requests.h"
#include "serve/responses.h"
#include "testing.h"

namespace mt {
namespace {

using json = nlohmann::json;

constexpr int64_t kVocab = 50304;

// A body that should be refused, with the field and message it should be refused with.
struct Refusal {
  std::string body;  // JSON text
  std::string field;
  std::string message;
};

// Runs f, expects a RequestError with status 400, the field and the exact message.
template <typename F>
void expect_refused(F&& f, const std::string& field, const std::string& message) {
  try {
    f();
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.field, field);
    EXPECT_EQ(std::string(e.what()), message);
    return;
  }
  ADD_FAILURE() << "accepted; expected a refusal of \"" << field << "\": " << message;
}

CompletionRequest megatron(const std::string& body, RequestLimits limits = {}) {
  return parse_megatron_request(json::parse(body), limits, kVocab);
}

CompletionRequest openai(const std::string& body, RequestLimits limits = {}) {
  return parse_openai_request(json::parse(body), limits);
}
CompletionRequest chat(const std::string& body, RequestLimits limits = {}) {
  const auto ordered = nlohmann::ordered_json::parse(body);
  return parse_chat_request(json::parse(body), ordered.contains("messages") ? ordered["messages"] : nlohmann::ordered_json(),
                            limits);
}

// {"prompts": ["p", "p", ...]} with n prompts.
json n_prompts(int n) {
  json body = {{"prompts", json::array()}};
  for (int i = 0; i < n; ++i) body["prompts"].push_back("p");
  return body;
}

// ---- Megatron's PUT /api ----

TEST(ServeMegatronRequest, DefaultsAreMegatrons) {
  const CompletionRequest r = megatron(R"({"prompts": ["Hello", "world"]})");
  EXPECT_EQ(r.api, RequestApi::megatron);
  EXPECT_EQ(r.prompt_texts, (std::vector<std::string>{"Hello", "world"}));
  EXPECT_TRUE(r.prompt_ids.empty());
  EXPECT_EQ(r.prompt_count(), 2u);
  EXPECT_EQ(r.tokens_to_generate, 64);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);  // SamplingParams' own default is 1 (greedy): Megatron's is 0
  EXPECT_EQ(r.sampling.top_p, 0.0f);
  EXPECT_FALSE(r.seeded);
  EXPECT_FALSE(r.log_probs);
  EXPECT_FALSE(r.add_bos);
  EXPECT_FALSE(r.stop_token.has_value());
  EXPECT_TRUE(r.stop.empty());
  EXPECT_TRUE(r.stop_keep.empty());
  EXPECT_FALSE(r.echo);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.top_logprobs, 0);
}

TEST(ServeMegatronRequest, EveryFieldIsRead) {
  const CompletionRequest r = megatron(R"({
      "prompts": ["a", ""], "tokens_to_generate": 7, "logprobs": true, "temperature": 0.5, "top_k": 40,
      "add_BOS": true, "random_seed": 1234, "stop_token": 50303, "no_log": true,
      "top_p_decay": 0.0, "top_p_bound": 0.0, "prevent_newline_after_colon": false,
      "length_penalty": 1.0, "beam_width": null})");
  EXPECT_EQ(r.prompt_texts, (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(r.tokens_to_generate, 7);
  EXPECT_TRUE(r.log_probs);
  EXPECT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.top_p, 0.0f);
  EXPECT_TRUE(r.add_bos);
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, 1234u);
  ASSERT_TRUE(r.stop_token.has_value());
  EXPECT_EQ(*r.stop_token, 50303);

  const CompletionRequest p = megatron(R"({"prompts": ["a"], "top_p": 0.9, "random_seed": 0})");
  EXPECT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_TRUE(p.seeded);  // seed 0 is still a seed
  EXPECT_EQ(p.sampling.seed, 0u);
}

TEST(ServeMegatronRequest, LimitsAreInclusive) {
  const CompletionRequest r = megatron(R"({"prompts": ["a"], "tokens_to_generate": 0, "logprobs": true,
                                           "temperature": 100, "top_k": 1000})");
  EXPECT_EQ(r.tokens_to_generate, 0);  // scoring the prompt only
  EXPECT_EQ(r.sampling.temperature, 100.0f);
  EXPECT_EQ(r.sampling.top_k, 1000);
  EXPECT_EQ(megatron(R"({"prompts": ["a"], "top_p": 1.0})").sampling.top_p, 1.0f);
  EXPECT_EQ(megatron(R"({"prompts": ["a"], "stop_token": 0})").stop_token, std::optional<int32_t>(0));
  EXPECT_EQ(parse_megatron_request(n_prompts(128), {}, kVocab).prompt_count(), 128u);
  RequestLimits two;
  two.max_prompts = 2;
  EXPECT_EQ(parse_megatron_request(n_prompts(2), two, kVocab).prompt_count(), 2u);
}

TEST(ServeMegatronRequest, StopOnEolKeepsTheNewlines) {
  EXPECT_EQ(megatron(R"({"prompts": ["a"], "stop_on_eol": true})").stop_keep, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(megatron(R"({"prompts": ["a"], "stop_on_double_eol": true})").stop_keep,
            (std::vector<std::string>{"\n\n"}));
  const CompletionRequest both = megatron(R"({"prompts": ["a"], "stop_on_eol": true, "stop_on_double_eol": true})");
  EXPECT_EQ(both.stop_keep, (std::vector<std::string>{"\n\n", "\n"}));
  EXPECT_TRUE(both.stop.empty());  // kept in the text, not cut away
  EXPECT_TRUE(megatron(R"({"prompts": ["a"], "stop_on_eol": false, "stop_on_double_eol": false})").stop_keep.empty());
}

TEST(ServeMegatronRequest, BadBodiesGetMegatronsMessages) {
  const std::string temperature = "temperature must be a positive number less than or equal to 100.0";
  const std::string seed_sign = "random_seed must be a positive integer";
  const std::vector<Refusal> cases = {
      {R"({})", "prompts", "prompts argument required"},
      {R"({"tokens_to_generate": 5})", "prompts", "prompts argument required"},
      {R"({"prompts": ["a"], "max_len": 8})", "max_len", "max_len is no longer used.  Replace with tokens_to_generate"},
      {R"({"sentences": ["a"], "prompts": ["a"]})", "sentences", "sentences is no longer used.  Replace with prompts"},
      {R"({"prompts": "a"})", "prompts", "prompts is not a list of strings"},
      {R"({"prompts": {"a": 1}})", "prompts", "prompts is not a list of strings"},
      {R"({"prompts": ["a", 5]})", "prompts", "prompts is not a list of strings"},
      {R"({"prompts": [["a"]]})", "prompts", "prompts is not a list of strings"},
      {R"({"prompts": []})", "prompts", "prompts is empty"},
      {R"({"prompts": ["a"], "tokens_to_generate": 0})", "tokens_to_generate",
       "tokens_to_generate=0 implies logprobs should be True"},
      {R"({"prompts": ["a"], "tokens_to_generate": 0, "logprobs": false})", "tokens_to_generate",
       "tokens_to_generate=0 implies logprobs should be True"},
      {R"({"prompts": ["a"], "logprobs": 1})", "logprobs", "logprobs must be a boolean value"},
      {R"({"prompts": ["a"], "temperature": 0})", "temperature", temperature},
      {R"({"prompts": ["a"], "temperature": 0.0})", "temperature", temperature},
      {R"({"prompts": ["a"], "temperature": -1})", "temperature", temperature},
      {R"({"prompts": ["a"], "temperature": 100.5})", "temperature", temperature},
      {R"({"prompts": ["a"], "temperature": "hot"})", "temperature", temperature},
      {R"({"prompts": ["a"], "top_k": 5, "top_p": 0.5})", "top_p", "cannot set both top-k and top-p samplings."},
      // Both set is checked before top_p's range, as in Megatron.
      {R"({"prompts": ["a"], "top_k": 5, "top_p": 1.5})", "top_p", "cannot set both top-k and top-p samplings."},
      {R"({"prompts": ["a"], "add_BOS": "yes"})", "add_BOS", "add_BOS must be a boolean value"},
      {R"({"prompts": ["a", ""]})", "prompts", "Empty prompts require add_BOS=true"},
      {R"({"prompts": [""], "add_BOS": false})", "prompts", "Empty prompts require add_BOS=true"},
      {R"({"prompts": ["a"], "stop_on_eol": 1})", "stop_on_eol", "stop_on_eol must be a boolean value"},
      {R"({"prompts": ["a"], "stop_on_double_eol": "no"})", "stop_on_double_eol",
       "stop_on_double_eol must be a boolean value"},
      {R"({"prompts": ["a"], "prevent_newline_after_colon": 0})", "prevent_newline_after_colon",
       "prevent_newline_after_colon must be a boolean value"},
      {R"({"prompts": ["a"], "random_seed": -1})", "random_seed", seed_sign},
      {R"({"prompts": ["a"], "random_seed": 1.5})", "random_seed", "random_seed must be integer"},
      {R"({"prompts": ["a"], "random_seed": "7"})", "random_seed", "random_seed must be integer"},
      {R"({"prompts": ["a"], "no_log": "yes"})", "no_log", "no_log must be a boolean value"},
      // Not Megatron's checks: stop_token must name a token; the engine has no beam search,
      // top-p decay or bound, or newline prevention; unknown fields are refused.
      {R"({"prompts": ["a"], "stop_token": 50304})", "stop_token",
       "stop_token must be an integer naming a token of the vocabulary"},
      {R"({"prompts": ["a"], "stop_token": -1})", "stop_token",
       "stop_token must be an integer naming a token of the vocabulary"},
      {R"({"prompts": ["a"], "stop_token": "eod"})", "stop_token",
       "stop_token must be an integer naming a token of the vocabulary"},
      {R"({"prompts": ["a"], "beam_width": 2})", "beam_width", "beam_width: beam search is not supported"},
      {R"({"prompts": ["a"], "length_penalty": 0.5})", "length_penalty",
       "length_penalty: length_penalty (beam search) is not supported"},
      {R"({"prompts": ["a"], "top_p": 0.5, "top_p_decay": 0.5})", "top_p_decay", "top_p_decay: top-p decay is not supported"},
      {R"({"prompts": ["a"], "top_p": 0.5, "top_p_bound": 0.1})", "top_p_bound", "top_p_bound: top-p bound is not supported"},
      {R"({"prompts": ["a"], "prevent_newline_after_colon": true})", "prevent_newline_after_colon",
       "prevent_newline_after_colon: prevent_newline_after_colon is not supported"},
      {R"({"prompts": ["a"], "foo": 1})", "foo", "unknown field \"foo\""},
      {R"(["a"])", "", "the request body must be a JSON object"},
      {R"("a")", "", "the request body must be a JSON object"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.body);
    expect_refused([&] { megatron(c.body); }, c.field, c.message);
  }
}

// Megatron words a value of the wrong type and one out of range differently.
TEST(ServeMegatronRequest, TypeAndRangeHaveMegatronsTwoMessages) {
  const std::string top_k_range = "top_k must be equal to or greater than 0 and less than or equal to 1000";
  const std::string top_k_type = "top_k must be an integer equal to or greater than 0 and less than or equal to 1000";
  const std::vector<Refusal> cases = {
      {R"({"prompts": ["a"], "tokens_to_generate": -1})", "tokens_to_generate",
       "tokens_to_generate must be an integer greater than or equal to 0"},
      {R"({"prompts": ["a"], "tokens_to_generate": "5"})", "tokens_to_generate",
       "tokens_to_generate must be an integer greater than 0"},
      {R"({"prompts": ["a"], "tokens_to_generate": 2.5})", "tokens_to_generate",
       "tokens_to_generate must be an integer greater than 0"},
      {R"({"prompts": ["a"], "top_k": 1001})", "top_k", top_k_range},
      {R"({"prompts": ["a"], "top_k": -1})", "top_k", top_k_range},
      {R"({"prompts": ["a"], "top_k": 2.5})", "top_k", top_k_type},
      {R"({"prompts": ["a"], "top_k": "5"})", "top_k", top_k_type},
      {R"({"prompts": ["a"], "top_p": 1.5})", "top_p", "top_p must be less than or equal to 1.0"},
      {R"({"prompts": ["a"], "top_p": -0.5})", "top_p", "top_p must be less than or equal to 1.0"},
      {R"({"prompts": ["a"], "top_p": "0.5"})", "top_p", "top_p must be a positive float less than or equal to 1.0"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.body);
    expect_refused([&] { megatron(c.body); }, c.field, c.message);
  }
}

// Megatron asks for prompts before it looks at the renamed fields (max_len, sentences).
TEST(ServeMegatronRequest, PromptsAreAskedForFirst) {
  expect_refused([] { megatron(R"({"max_len": 8})"); }, "prompts", "prompts argument required");
  expect_refused([] { megatron(R"({"sentences": ["a"]})"); }, "prompts", "prompts argument required");
}

TEST(ServeMegatronRequest, AtMostMaxPromptsPrompts) {
  expect_refused([] { parse_megatron_request(n_prompts(129), {}, kVocab); }, "prompts",
                 "Maximum number of prompts is 128");
  RequestLimits two;
  two.max_prompts = 2;
  expect_refused([&] { parse_megatron_request(n_prompts(3), two, kVocab); }, "prompts",
                 "Maximum number of prompts is 2");
}

TEST(ServeMegatronRequest, StopTokenIsCheckedAgainstTheVocabulary) {
  EXPECT_EQ(parse_megatron_request(json::parse(R"({"prompts": ["a"], "stop_token": 9})"), {}, 10).stop_token,
            std::optional<int32_t>(9));
  expect_refused([] { parse_megatron_request(json::parse(R"({"prompts": ["a"], "stop_token": 10})"), {}, 10); },
                 "stop_token", "stop_token must be an integer naming a token of the vocabulary");
}

// ---- OpenAI's POST /v1/completions ----

TEST(ServeOpenAiRequest, DefaultsAreOpenAis) {
  const CompletionRequest r = openai(R"({"prompt": "Hello"})");
  EXPECT_EQ(r.api, RequestApi::openai);
  EXPECT_EQ(r.prompt_texts, (std::vector<std::string>{"Hello"}));
  EXPECT_TRUE(r.prompt_ids.empty());
  EXPECT_EQ(r.tokens_to_generate, 16);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 0.0f);  // top_p 1 keeps every token: off
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.seeded);
  EXPECT_FALSE(r.log_probs);
  EXPECT_EQ(r.top_logprobs, 0);
  EXPECT_FALSE(r.echo);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_TRUE(r.stop_keep.empty());
  EXPECT_FALSE(r.stop_token.has_value());
  EXPECT_FALSE(r.add_bos);
  EXPECT_EQ(r.model, "");
}

TEST(ServeOpenAiRequest, EveryFieldIsRead) {
  const CompletionRequest r = openai(R"({
      "model": "gpt-tiny", "prompt": "Hi", "max_tokens": 5, "temperature": 0.7, "top_p": 0.9, "n": 1,
      "best_of": 1, "stream": true, "logprobs": 3, "echo": true, "stop": "\n", "seed": 42,
      "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "user": "u1", "suffix": null,
      "stream_options": {"include_usage": true}, "ignore_eos": false})");
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.model, "gpt-tiny");
  EXPECT_EQ(r.tokens_to_generate, 5);
  EXPECT_EQ(r.sampling.temperature, 0.7f);
  EXPECT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.log_probs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  EXPECT_TRUE(r.seeded);
  EXPECT_EQ(r.sampling.seed, 42u);

  const CompletionRequest k = openai(R"({"prompt": "Hi", "top_k": 40, "max_tokens": 0})");
  EXPECT_EQ(k.sampling.top_k, 40);
  EXPECT_EQ(k.sampling.top_p, 0.0f);
  EXPECT_EQ(k.tokens_to_generate, 0);
  EXPECT_EQ(openai(R"({"prompt": "Hi", "temperature": 2})").sampling.temperature, 2.0f);
  EXPECT_EQ(openai(R"({"prompt": "Hi", "top_p": 1, "top_k": 5})").sampling.top_p, 0.0f);  // 1 is off
  // Both limits, as Megatron's dynamic server allows: top-k, then top-p within it.
  const CompletionRequest both = openai(R"({"prompt": "Hi", "top_p": 0.5, "top_k": 5})");
  EXPECT_EQ(both.sampling.top_k, 5);
  EXPECT_EQ(both.sampling.top_p, 0.5f);
  EXPECT_EQ(openai(R"({"prompt": "Hi", "top_p": 0.5, "top_k": 1})").sampling.top_p, 0.0f);  // greedy
}

TEST(ServeOpenAiRequest, TemperatureZeroIsGreedy) {
  const CompletionRequest r = openai(R"({"prompt": "Hi", "temperature": 0})");
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 1);
  EXPECT_EQ(r.sampling.top_p, 0.0f);
  EXPECT_TRUE(r.sampling.greedy());
  // Greedy overrides whatever else narrows the draw.
  const CompletionRequest p = openai(R"({"prompt": "Hi", "temperature": 0, "top_p": 0.5})");
  EXPECT_EQ(p.sampling.top_k, 1);
  EXPECT_EQ(p.sampling.top_p, 0.0f);
  EXPECT_EQ(openai(R"({"prompt": "Hi", "temperature": 0, "top_k": 50})").sampling.top_k, 1);
}

TEST(ServeOpenAiRequest, PromptForms) {
  const CompletionRequest text = openai(R"({"prompt": "one"})");
  EXPECT_EQ(text.prompt_texts, (std::vector<std::string>{"one"}));
  EXPECT_EQ(text.prompt_count(), 1u);

  const CompletionRequest texts = openai(R"({"prompt": ["one", "two", "three"]})");
  EXPECT_EQ(texts.prompt_texts, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_TRUE(texts.prompt_ids.empty());
  EXPECT_EQ(texts.prompt_count(), 3u);

  const CompletionRequest ids = openai(R"({"prompt": [1, 2, 0]})");
  EXPECT_TRUE(ids.prompt_texts.empty());
  EXPECT_EQ(ids.prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2, 0}}));
  EXPECT_EQ(ids.prompt_count(), 1u);

  const CompletionRequest lists = openai(R"({"prompt": [[5, 6], [7], [2147483647]]})");
  EXPECT_TRUE(lists.prompt_texts.empty());
  EXPECT_EQ(lists.prompt_ids, (std::vector<std::vector<int32_t>>{{5, 6}, {7}, {2147483647}}));
  EXPECT_EQ(lists.prompt_count(), 3u);
}

TEST(ServeOpenAiRequest, LogprobsAndStopAndSeed) {
  const CompletionRequest zero = openai(R"({"prompt": "a", "logprobs": 0})");
  EXPECT_TRUE(zero.log_probs);  // the chosen tokens' log-probabilities, no alternatives
  EXPECT_EQ(zero.top_logprobs, 0);
  const CompletionRequest most = openai(R"({"prompt": "a", "logprobs": 20})");
  EXPECT_TRUE(most.log_probs);
  EXPECT_EQ(most.top_logprobs, 20);
  EXPECT_FALSE(openai(R"({"prompt": "a", "logprobs": null})").log_probs);

  EXPECT_EQ(openai(R"({"prompt": "a", "stop": "END"})").stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(openai(R"({"prompt": "a", "stop": ["x", "\n\n", "yz", "."]})").stop,
            (std::vector<std::string>{"x", "\n\n", "yz", "."}));
  EXPECT_TRUE(openai(R"({"prompt": "a", "stop": []})").stop.empty());
  EXPECT_TRUE(openai(R"({"prompt": "a", "stop": null})").stop.empty());

  const CompletionRequest seeded = openai(R"({"prompt": "a", "seed": 7})");
  EXPECT_TRUE(seeded.seeded);
  EXPECT_EQ(seeded.sampling.seed, 7u);
  const CompletionRequest negative = openai(R"({"prompt": "a", "seed": -1})");
  EXPECT_TRUE(negative.seeded);
  EXPECT_EQ(negative.sampling.seed, static_cast<uint64_t>(-1));
}

TEST(ServeOpenAiRequest, BadBodiesAreRefused) {
  const std::string shape = "prompt must be a string, a list of strings, a list of token ids or a list of such lists";
  const std::string stop = "stop must be a non-empty string or a list of at most 4 non-empty strings";
  const std::string top_p = "top_p must be a number in (0, 1]";
  const std::vector<Refusal> cases = {
      {R"({})", "prompt", "prompt is required"},
      {R"({"prompt": null})", "prompt", "prompt is required"},
      {R"({"prompt": 5})", "prompt", shape},
      {R"({"prompt": {"text": "a"}})", "prompt", shape},
      {R"({"prompt": []})", "prompt", "prompt is an empty list"},
      {R"({"prompt": ""})", "prompt", "a prompt is empty"},
      {R"({"prompt": ["a", ""]})", "prompt", "a prompt is empty"},
      {R"({"prompt": [[1], []]})", "prompt", "a prompt is empty"},
      {R"({"prompt": [[1], ["a"]]})", "prompt", shape},
      {R"({"prompt": ["a", 1]})", "prompt", shape},
      {R"({"prompt": [-1]})", "prompt", "prompt token ids must be integers >= 0"},
      {R"({"prompt": [1, 2.5]})", "prompt", "prompt token ids must be integers >= 0"},
      {R"({"prompt": [1, "a"]})", "prompt", "prompt token ids must be integers >= 0"},
      {R"({"prompt": [2147483648]})", "prompt", "prompt token ids must be integers >= 0"},
      {R"({"prompt": [[-1]]})", "prompt", shape},
      {R"({"prompt": "a", "model": 5})", "model", "model must be a string"},
      {R"({"prompt": "a", "max_tokens": -1})", "max_tokens", "max_tokens must be an integer >= 0"},
      {R"({"prompt": "a", "max_tokens": "16"})", "max_tokens", "max_tokens must be an integer >= 0"},
      {R"({"prompt": "a", "temperature": 2.5})", "temperature", "temperature must be a number in [0, 2]"},
      {R"({"prompt": "a", "temperature": -0.1})", "temperature", "temperature must be a number in [0, 2]"},
      {R"({"prompt": "a", "top_p": 0})", "top_p", top_p},
      {R"({"prompt": "a", "top_p": 1.01})", "top_p", top_p},
      {R"({"prompt": "a", "top_k": -1})", "top_k", "top_k must be an integer in [0, 1000] (0: no limit)"},
      {R"({"prompt": "a", "n": 2})", "n", "n: only 1 completion per prompt is supported"},
      {R"({"prompt": "a", "best_of": 3})", "best_of", "best_of: only 1 is supported"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs", "logprobs must be an integer in [0, 20]"},
      {R"({"prompt": "a", "logprobs": -1})", "logprobs", "logprobs must be an integer in [0, 20]"},
      {R"({"prompt": "a", "logprobs": true})", "logprobs", "logprobs must be an integer in [0, 20]"},
      {R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", "stop", stop},
      {R"({"prompt": "a", "stop": ""})", "stop", stop},
      {R"({"prompt": "a", "stop": ["a", ""]})", "stop", stop},
      {R"({"prompt": "a", "stop": ["a", 1]})", "stop", stop},
      {R"({"prompt": "a", "stop": 5})", "stop", stop},
      {R"({"prompt": "a", "stream": "yes"})", "stream", "stream must be a boolean"},
      {R"({"prompt": "a", "echo": 1})", "echo", "echo must be a boolean"},
      {R"({"prompt": "a", "seed": 1.5})", "seed", "seed must be an integer"},
      {R"({"prompt": "a", "presence_penalty": 0.5})", "presence_penalty",
       "presence_penalty: presence_penalty is not supported"},
      {R"({"prompt": "a", "frequency_penalty": -1})", "frequency_penalty",
       "frequency_penalty: frequency_penalty is not supported"},
      {R"({"prompt": "a", "logit_bias": {"1": 2}})", "logit_bias", "logit_bias is not supported"},
      {R"({"prompt": "a", "suffix": "x"})", "suffix", "suffix: suffix (insertion) is not supported"},
      {R"({"prompt": "a", "user": 5})", "user", "user must be a string"},
      {R"({"prompt": "a", "temprature": 0.5})", "temprature", "unknown field \"temprature\""},
      {R"([{"prompt": "a"}])", "", "the request body must be a JSON object"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.body);
    expect_refused([&] { openai(c.body); }, c.field, c.message);
  }
}

TEST(ServeOpenAiRequest, LimitsComeFromTheServer) {
  RequestLimits limits;
  limits.max_prompts = 2;
  limits.max_top_logprobs = 5;
  EXPECT_EQ(openai(R"({"prompt": ["a", "b"], "logprobs": 5})", limits).top_logprobs, 5);
  expect_refused([&] { openai(R"({"prompt": ["a", "b", "c"]})", limits); }, "prompt", "at most 2 prompts per request");
  expect_refused([&] { openai(R"({"prompt": [[1], [2], [3]]})", limits); }, "prompt", "at most 2 prompts per request");
  expect_refused([&] { openai(R"({"prompt": "a", "logprobs": 6})", limits); }, "logprobs",
                 "logprobs must be an integer in [0, 5]");
}

// ---- The text a client sees ----

// ---- OpenAI's POST /v1/chat/completions ----

TEST(ServeChatRequest, DefaultsAndEveryField) {
  const CompletionRequest d = chat(R"({"messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(d.api, RequestApi::chat);
  EXPECT_EQ(d.tokens_to_generate, 16);
  EXPECT_FALSE(d.log_probs || d.stream || d.include_usage || d.add_bos);
  EXPECT_TRUE(d.prompt_texts.empty() && d.prompt_ids.empty());  // the chat template makes the prompt
  const CompletionRequest r = chat(R"({
      "model": "m", "messages": [{"role": "system", "content": "S"}, {"content": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b"}], "role": "user"}, {"role": "assistant", "content": null}],
      "max_tokens": 3, "max_completion_tokens": 7, "temperature": 0, "n": 1, "stream": true,
      "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 4, "stop": ["x"], "seed": 9,
      "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}, "user": "u", "tools": [], "tool_choice": "none",
      "parallel_tool_calls": false, "response_format": {"type": "text"}, "ignore_eos": false, "add_BOS": true})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.tokens_to_generate, 7);  // max_completion_tokens over max_tokens
  EXPECT_EQ(r.sampling.top_k, 1);      // temperature 0: greedy
  EXPECT_TRUE(r.stream && r.include_usage && r.log_probs && r.seeded && r.add_bos);
  EXPECT_EQ(r.top_logprobs, 4);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x"}));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1]["content"], "ab");  // text parts joined
  EXPECT_EQ(r.messages[1].begin().key(), "content");  // the client's key order, for templates that print JSON
  EXPECT_EQ(r.messages[2]["content"], "");
}

TEST(ServeChatRequest, BadBodiesAreRefused) {
  const std::string list = "messages must be a non-empty list of {role, content}";
  const std::vector<Refusal> cases = {
      {R"({})", "messages", list},
      {R"({"messages": []})", "messages", list},
      {R"({"messages": "hi"})", "messages", list},
      {R"({"messages": [{"content": "x"}]})", "messages", "messages[0] must be an object with a string \"role\""},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages", "messages[0]: content must be a string or a list of text parts"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages",
       "messages[0]: only {\"type\": \"text\", \"text\": ...} content parts are supported"},
      {R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}]})", "messages",
       "messages[0]: tool_calls (function calling) are not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools",
       "tools (function calling) are not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice",
       "tool_choice: function calling is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})", "response_format",
       "response_format: only {\"type\": \"text\"} is supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", "logprobs",
       "logprobs must be a boolean (top_logprobs says how many alternatives)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "top_logprobs needs logprobs: true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs",
       "top_logprobs must be an integer in [0, 20]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true})", "ignore_eos", "ignore_eos: ignore_eos is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": 1})", "stream_options", "stream_options must be an object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": []})", "functions", "unknown field \"functions\""},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.body);
    expect_refused([&] { chat(c.body); }, c.field, c.message);
  }
}

TEST(ServeText, CutAtStopCutsBeforeTheFirstStop) {
  bool cut = false;
  EXPECT_EQ(cut_at_stop("hello world", {"wor"}, &cut), "hello ");
  EXPECT_TRUE(cut);
  // The earliest occurrence of any stop string, whichever is listed first.
  EXPECT_EQ(cut_at_stop("abcdef", {"de", "bc"}, &cut), "a");
  EXPECT_TRUE(cut);
  EXPECT_EQ(cut_at_stop("abcabc", {"c"}, &cut), "ab");
  EXPECT_TRUE(cut);
  EXPECT_EQ(cut_at_stop("stop here", {"stop"}, &cut), "");
  EXPECT_TRUE(cut);
  EXPECT_EQ(cut_at_stop("hello", {"xyz", "hello!"}, &cut), "hello");
  EXPECT_FALSE(cut);
  EXPECT_EQ(cut_at_stop("hello", {}, &cut), "hello");
  EXPECT_FALSE(cut);
  EXPECT_EQ(cut_at_stop("hello", {""}, &cut), "hello");  // an empty stop string stops nothing
  EXPECT_FALSE(cut);
  EXPECT_EQ(cut_at_stop("a\n\nb", {"\n\n"}), "a");  // cut may be left out
}

TEST(ServeText, SettledLengthHoldsBackAPossibleStop) {
  EXPECT_EQ(settled_length("hello wor", {"world"}), 6u);
  EXPECT_EQ(settled_length("hello w", {"xyz"}), 7u);
  EXPECT_EQ(settled_length("hello w", {}), 7u);
  EXPECT_EQ(settled_length("hello w", {""}), 7u);
  EXPECT_EQ(settled_length("", {"ab"}), 0u);
  EXPECT_EQ(settled_length("a", {"ab"}), 0u);
  EXPECT_EQ(settled_length("xaba", {"abab"}), 1u);  // the longest tail that begins a stop: "aba"
  // Of several stops, the one that holds back most.
  EXPECT_EQ(settled_length("abc", {"cx", "bcd"}), 1u);
  EXPECT_EQ(settled_length("abc", {"bcd", "cx"}), 1u);
  EXPECT_EQ(settled_length("end.\n", {"\n\n"}), 4u);
}

TEST(ServeText, SettledLengthHoldsBackAnUnfinishedCharacter) {
  // é = C3 A9.
  EXPECT_EQ(settled_length("ab\xc3", {}), 2u);
  EXPECT_EQ(settled_length("ab\xc3\xa9", {}), 4u);
  EXPECT_EQ(settled_length("\xc3", {}), 0u);
  EXPECT_EQ(settled_length("\xc3\xa9!", {}), 3u);
  // € = E2 82 AC.
  EXPECT_EQ(settled_length("x\xe2", {}), 1u);
  EXPECT_EQ(settled_length("x\xe2\x82", {}), 1u);
  EXPECT_EQ(settled_length("x\xe2\x82\xac", {}), 4u);
  // 😀 = F0 9F 98 80.
  const std::string emoji = "\xf0\x9f\x98\x80";
  for (size_t bytes = 1; bytes < 4; ++bytes) EXPECT_EQ(settled_length("a" + emoji.substr(0, bytes), {}), 1u) << bytes;
  EXPECT_EQ(settled_length("a" + emoji, {}), 5u);
  EXPECT_EQ(settled_length(emoji + emoji.substr(0, 2), {}), 4u);
  EXPECT_EQ(settled_length("\xc3\xa9\xe2\x82", {}), 2u);  // a whole é, then an unfinished €
  // A stray continuation byte can complete nothing: it is not held.
  EXPECT_EQ(settled_length("ab\xa9", {}), 3u);
  // Held back to the start of a stop, then further to the start of the character that stop splits.
  EXPECT_EQ(settled_length("ab\xc3\xa9", {"\xa9z"}), 2u);
  EXPECT_EQ(settled_length("ab\xc3\xa9" "c", {"cd"}), 4u);
}

// A tokenizer that decodes an unfinished character as U+FFFD (GPT-2's) would otherwise stream
// the stand-in and then, once the character completes, text that no longer extends what was sent.
TEST(ServeText, SettledLengthHoldsBackTrailingReplacementCharacters) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(settled_length("a" + fffd, {}), 1u);
  EXPECT_EQ(settled_length("a" + fffd + fffd, {}), 1u);
  EXPECT_EQ(settled_length("a" + fffd + "b", {}), 5u);  // one inside is settled
  EXPECT_EQ(settled_length(fffd, {}), 0u);
}

TEST(ServeText, DumpJsonReplacesBadUtf8) {
  const json bad = "a\xff" "b";
  EXPECT_THROW(bad.dump(), json::type_error);  // what dump_json is for
  std::string out;
  EXPECT_NO_THROW(out = dump_json(bad));
  EXPECT_NE(out.find("\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(out, "\"a\xef\xbf\xbd" "b\"");
  EXPECT_EQ(dump_json(json("ab\xc3")), "\"ab\xef\xbf\xbd\"");  // a character cut short
  // Good UTF-8 passes as it is (not \u-escaped), and the JSON is compact.
  EXPECT_EQ(dump_json(json("\xc3\xa9")), "\"\xc3\xa9\"");
  EXPECT_EQ(dump_json(json{{"text", {"a", "b"}}, {"n", 1}}), R"({"n":1,"text":["a","b"]})");
}

TEST(ServeText, ErrorJsonHasOpenAisShapeAndMegatronsMessage) {
  EXPECT_EQ(error_json(400, "prompts", "prompts is empty"),
            json::parse(R"({"error": {"message": "prompts is empty", "type": "invalid_request_error",
                                      "param": "prompts", "code": 400}, "message": "prompts is empty"})"));
  EXPECT_EQ(error_json(503, "", "the server is shutting down"),
            json::parse(R"({"error": {"message": "the server is shutting down", "type": "server_error",
                                      "param": null, "code": 503}, "message": "the server is shutting down"})"));
  const json e = error_json(429, "", "busy");
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], 429);
  EXPECT_EQ(dump_json(error_json(404, "", "no such route")),
            R"({"error":{"code":404,"message":"no such route","param":null,"type":"invalid_request_error"},"message":"no such route"})");
}

}  // namespace
}  // namespace mt
