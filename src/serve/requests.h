// Owns reading the bodies of the server's generation requests into one CompletionRequest:
// Megatron's PUT /api (megatron/inference/text_generation_server.py: its fields, defaults and
// checks, with its messages), OpenAI's completions (POST /v1/completions) and chat completions
// (POST /v1/chat/completions, as Megatron's dynamic server reads them). Every field is
// checked for type and range; an unknown field, or one whose feature the engine lacks, is refused.
// A refusal is a RequestError: the HTTP status and the field it names.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/sampler.h"

namespace mt {

struct RequestError : std::runtime_error {
  RequestError(int status, std::string field, const std::string& message)
      : std::runtime_error(message), status(status), field(std::move(field)) {}
  int status;         // 400, 404, 413, 429, 503, ...
  std::string field;  // the request field at fault ("" for the request as a whole)
};

// What a request may ask for (the server's flags).
struct RequestLimits {
  int64_t max_prompts = 128;      // prompts in one request (Megatron's limit)
  int64_t max_top_logprobs = 20;  // OpenAI's logprobs = n
};

enum class RequestApi { megatron, openai, chat };

struct CompletionRequest {
  RequestApi api = RequestApi::megatron;
  // Prompts as text (tokenized by the server) or, from an OpenAI request, as token ids.
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  int64_t tokens_to_generate = 0;
  SamplingParams sampling;
  bool seeded = false;      // sampling.seed came with the request (else the server draws one)
  bool log_probs = false;   // Megatron: prompt and generated; OpenAI: generated (and echoed prompt)
  int64_t top_logprobs = 0; // OpenAI's logprobs = n
  bool echo = false;        // OpenAI: the prompt leads the returned text
  bool stream = false;      // OpenAI: server-sent events
  bool add_bos = false;     // Megatron: a BOS (the EOD when the tokenizer has none) leads each prompt
  std::optional<int32_t> stop_token;  // Megatron: the token that ends generation (default: EOD)
  std::vector<std::string> stop;      // strings that end a generation; the text is cut before them
  std::vector<std::string> stop_keep; // strings that end a generation, kept in the text (stop_on_eol)
  std::string model;                  // OpenAI: echoed back
  nlohmann::ordered_json messages;    // chat: the conversation, in the order the client wrote it
  bool include_usage = false;         // OpenAI, streamed: a last chunk with the usage

  size_t prompt_count() const { return prompt_ids.empty() ? prompt_texts.size() : prompt_ids.size(); }
};

// The body of PUT /api. vocab_size: the model's (stop_token must name a token).
CompletionRequest parse_megatron_request(const nlohmann::json& body, const RequestLimits& limits, int64_t vocab_size);
// The body of POST /v1/completions.
CompletionRequest parse_openai_request(const nlohmann::json& body, const RequestLimits& limits);
// The body of POST /v1/chat/completions; `messages` is its "messages" read in order (key order
// matters to a template that prints a message as JSON). Each message has a role and a content
// (a string, or a list of {"type": "text", "text"} parts); prompt_ids stay empty: the chat
// template makes them (serve/chat_prompt.h).
CompletionRequest parse_chat_request(const nlohmann::json& body, const nlohmann::ordered_json& messages,
                                     const RequestLimits& limits);

}  // namespace mt
