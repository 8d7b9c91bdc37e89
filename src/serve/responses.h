// Owns what the server answers: the JSON of Megatron's PUT /api, of OpenAI's completions (whole,
// and as the chunks of a server-sent event stream), and of errors; and the text a client sees of
// a generation: cut before a stop string, and, while it streams, held back where a stop string or
// a UTF-8 character may still be completing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/generate.h"
#include "serve/requests.h"

namespace mt {

class GenerationService;

// JSON as the server sends it: bytes that are not UTF-8 (a token may end mid-character) become U+FFFD.
std::string dump_json(const nlohmann::json& j);
// {"error": {"message", "type", "param", "code"}, "message"} (OpenAI's shape, used by every
// endpoint, and the message again at the top, where Megatron's text_generation_cli.py reads it).
nlohmann::json error_json(int status, const std::string& field, const std::string& message);

// `text` cut before the first occurrence of any stop string; `cut` says whether one occurred.
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stop, bool* cut = nullptr);
// How much of `text` (an unfinished generation, already cut) a stream may send: not a tail that
// could be the start of a stop string, nor an incomplete UTF-8 character at the end, nor trailing
// U+FFFD (a tokenizer's stand-in for a character whose bytes have not all come yet).
size_t settled_length(const std::string& text, const std::vector<std::string>& stop);

// One prompt of a request as the server ran it.
struct PromptRun {
  std::string text;             // as the client sent it (or, for token ids, decoded)
  std::vector<int32_t> tokens;  // as fed to the model (with a BOS when add_BOS)
};

// The response of PUT /api: {"text", "tokens", "segments", "logprobs"}, each a list over the
// prompts, as Megatron's: the text is the prompt as sent and the generation's text after it, the
// tokens and segments hold the prompt's ids (with a BOS when add_BOS) and the generated ones.
nlohmann::json megatron_response(const GenerationService& service, const CompletionRequest& request,
                                 const std::vector<PromptRun>& prompts, const std::vector<GenerationResult>& results);

// OpenAI's view of one generation.
struct OpenAiChoice {
  std::string text;             // the generation (cut at a stop string, no EOD), after the prompt when echoed
  std::string finish_reason;    // "length" or "stop" (EOD or a stop string); "" while running
  std::vector<int32_t> tokens;  // the generated tokens the text covers (up to a stop string's cut)
};
OpenAiChoice openai_choice(const GenerationService& service, const CompletionRequest& request,
                           const GenerationResult& result);

// The logprobs object of a choice for generated tokens [from, to) (and, when echoing and from = 0,
// the prompt's tokens first); text_offset counts from `offset` bytes.
nlohmann::json openai_logprobs(const GenerationService& service, const CompletionRequest& request,
                               const PromptRun& prompt, const GenerationResult& result, size_t from, size_t to,
                               size_t offset);

// The logprobs of a chat choice for generated tokens [from, to): {"content": [{"token", "logprob",
// "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
nlohmann::json chat_logprobs(const GenerationService& service, const CompletionRequest& request,
                             const GenerationResult& result, size_t from, size_t to);

// The response of POST /v1/chat/completions (chat.completion): one choice, the assistant's message.
nlohmann::json chat_response(const GenerationService& service, const CompletionRequest& request, const PromptRun& prompt,
                             const GenerationResult& result, const std::string& id, int64_t created,
                             const std::string& model);

// The usage object: prompt, completion and total tokens.
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// The response of POST /v1/completions (text_completion).
nlohmann::json openai_response(const GenerationService& service, const CompletionRequest& request,
                               const std::vector<PromptRun>& prompts, const std::vector<GenerationResult>& results,
                               const std::string& id, int64_t created, const std::string& model);

}  // namespace mt
