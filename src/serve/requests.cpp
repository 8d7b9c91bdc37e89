#include "serve/requests.h"

#include <algorithm>
#include <limits>
#include <set>

namespace mt {

namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const std::string& field, const std::string& message) { throw RequestError(400, field, message); }

void refuse_unknown_fields(const json& body, const std::set<std::string>& known) {
  if (!body.is_object()) refuse("", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items())
    if (!known.count(key)) refuse(key, "unknown field \"" + key + "\"");
}

// A present, non-null field.
bool given(const json& body, const char* name) { return body.contains(name) && !body.at(name).is_null(); }

bool boolean(const json& body, const char* name, bool fallback, const std::string& message) {
  if (!given(body, name)) return fallback;
  if (!body.at(name).is_boolean()) refuse(name, message);
  return body.at(name).get<bool>();
}

// type_message for a value that is not an integer, range_message (default: the same) for one
// outside [lo, hi].
int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi,
                const std::string& type_message, std::string range_message = "") {
  if (!given(body, name)) return fallback;
  if (range_message.empty()) range_message = type_message;
  const json& v = body.at(name);
  if (!v.is_number_integer()) refuse(name, type_message);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) refuse(name, range_message);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) refuse(name, range_message);
  return x;
}

double number(const json& body, const char* name, double fallback, double lo, double hi,
              const std::string& type_message, std::string range_message = "") {
  if (!given(body, name)) return fallback;
  if (range_message.empty()) range_message = type_message;
  const json& v = body.at(name);
  if (!v.is_number()) refuse(name, type_message);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) refuse(name, range_message);
  return x;
}

// A feature the engine lacks: the field may only carry its "off" value.
void refuse_unless_off(const json& body, const char* name, const json& off, const std::string& what) {
  if (given(body, name) && body.at(name) != off) refuse(name, std::string(name) + ": " + what + " is not supported");
}

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

// The sampling fields OpenAI's completions and chat completions share.
void read_openai_sampling(const json& body, CompletionRequest& r) {
  // temperature 0 is greedy; top_p 1 keeps every token (off); top_k 0 is no limit.
  r.sampling.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0, "temperature must be a number in [0, 2]"));
  const double top_p = number(body, "top_p", 1.0, 0.0, 1.0, "top_p must be a number in (0, 1]");
  if (top_p <= 0.0) refuse("top_p", "top_p must be a number in (0, 1]");
  r.sampling.top_k = integer(body, "top_k", 0, 0, 1000, "top_k must be an integer in [0, 1000] (0: no limit)");
  r.sampling.top_p = top_p < 1.0 ? static_cast<float>(top_p) : 0.0f;
  // Greedy (temperature 0 or top_k 1) ignores top_p; both limits otherwise apply, top-k first, as
  // Megatron's dynamic server does.
  if (r.sampling.temperature == 0.0f) r.sampling.top_k = 1;
  if (r.sampling.top_k == 1) r.sampling.top_p = 0.0f;
  integer(body, "n", 1, 1, 1, "n: only 1 completion per prompt is supported");
  r.stream = boolean(body, "stream", false, "stream must be a boolean");
  if (given(body, "stop")) {
    const json& stop = body.at("stop");
    const std::string message = "stop must be a non-empty string or a list of at most 4 non-empty strings";
    if (stop.is_string()) {
      r.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array() && stop.size() <= 4 && std::all_of(stop.begin(), stop.end(), [](const json& s) { return s.is_string(); })) {
      for (const json& s : stop) r.stop.push_back(s.get<std::string>());
    } else {
      refuse("stop", message);
    }
    for (const std::string& s : r.stop)
      if (s.empty()) refuse("stop", message);
  }
  if (given(body, "seed")) {
    r.sampling.seed = static_cast<uint64_t>(integer(body, "seed", 0, std::numeric_limits<int64_t>::min(), kMaxInt, "seed must be an integer"));
    r.seeded = true;
  }
  refuse_unless_off(body, "presence_penalty", 0, "presence_penalty");
  refuse_unless_off(body, "frequency_penalty", 0, "frequency_penalty");
  if (given(body, "logit_bias") && !(body.at("logit_bias").is_object() && body.at("logit_bias").empty()))
    refuse("logit_bias", "logit_bias is not supported");
  if (given(body, "user") && !body.at("user").is_string()) refuse("user", "user must be a string");
  refuse_unless_off(body, "ignore_eos", false, "ignore_eos");
}

// stream_options: include_usage (a last chunk with the usage), the one option OpenAI has.
void read_stream_options(const json& body, CompletionRequest& r) {
  if (!given(body, "stream_options")) return;
  const json& o = body.at("stream_options");
  if (!o.is_object()) refuse("stream_options", "stream_options must be an object");
  r.include_usage = boolean(o, "include_usage", false, "stream_options.include_usage must be a boolean");
}

}  // namespace

CompletionRequest parse_megatron_request(const json& body, const RequestLimits& limits, int64_t vocab_size) {
  if (!body.is_object()) refuse("", "the request body must be a JSON object");
  // Megatron's order: prompts must be there, then the renamed fields are refused.
  if (!body.contains("prompts")) refuse("prompts", "prompts argument required");
  if (body.contains("max_len")) refuse("max_len", "max_len is no longer used.  Replace with tokens_to_generate");
  if (body.contains("sentences")) refuse("sentences", "sentences is no longer used.  Replace with prompts");
  refuse_unknown_fields(body, {"prompts", "tokens_to_generate", "logprobs", "temperature", "top_k", "top_p",
                               "top_p_decay", "top_p_bound", "add_BOS", "stop_on_double_eol", "stop_on_eol",
                               "prevent_newline_after_colon", "random_seed", "no_log", "beam_width", "stop_token",
                               "length_penalty"});
  CompletionRequest r;
  r.api = RequestApi::megatron;
  const json& prompts = body.at("prompts");
  if (!prompts.is_array() || !std::all_of(prompts.begin(), prompts.end(), [](const json& p) { return p.is_string(); }))
    refuse("prompts", "prompts is not a list of strings");
  if (prompts.empty()) refuse("prompts", "prompts is empty");
  if (static_cast<int64_t>(prompts.size()) > limits.max_prompts)
    refuse("prompts", "Maximum number of prompts is " + std::to_string(limits.max_prompts));
  for (const json& p : prompts) r.prompt_texts.push_back(p.get<std::string>());

  r.tokens_to_generate = integer(body, "tokens_to_generate", 64, 0, kMaxInt, "tokens_to_generate must be an integer greater than 0",
                                 "tokens_to_generate must be an integer greater than or equal to 0");
  r.log_probs = boolean(body, "logprobs", false, "logprobs must be a boolean value");
  if (r.tokens_to_generate == 0 && !r.log_probs)
    refuse("tokens_to_generate", "tokens_to_generate=0 implies logprobs should be True");
  const std::string temperature_message = "temperature must be a positive number less than or equal to 100.0";
  r.sampling.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 100.0, temperature_message));
  if (r.sampling.temperature <= 0.0f) refuse("temperature", temperature_message);
  r.sampling.top_k = integer(body, "top_k", 0, 0, 1000,
                             "top_k must be an integer equal to or greater than 0 and less than or equal to 1000",
                             "top_k must be equal to or greater than 0 and less than or equal to 1000");
  r.sampling.top_p = static_cast<float>(
      number(body, "top_p", 0.0, -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity(),
             "top_p must be a positive float less than or equal to 1.0"));
  if (r.sampling.top_p > 0.0f && r.sampling.top_k > 0) refuse("top_p", "cannot set both top-k and top-p samplings.");
  if (!(r.sampling.top_p >= 0.0f && r.sampling.top_p <= 1.0f)) refuse("top_p", "top_p must be less than or equal to 1.0");
  refuse_unless_off(body, "top_p_decay", 0.0, "top-p decay");
  refuse_unless_off(body, "top_p_bound", 0.0, "top-p bound");
  r.add_bos = boolean(body, "add_BOS", false, "add_BOS must be a boolean value");
  if (!r.add_bos && std::any_of(r.prompt_texts.begin(), r.prompt_texts.end(), [](const std::string& p) { return p.empty(); }))
    refuse("prompts", "Empty prompts require add_BOS=true");
  // Megatron ends these generations at a newline token and keeps it in the text.
  if (boolean(body, "stop_on_double_eol", false, "stop_on_double_eol must be a boolean value"))
    r.stop_keep.push_back("\n\n");
  if (boolean(body, "stop_on_eol", false, "stop_on_eol must be a boolean value")) r.stop_keep.push_back("\n");
  boolean(body, "prevent_newline_after_colon", false, "prevent_newline_after_colon must be a boolean value");
  refuse_unless_off(body, "prevent_newline_after_colon", false, "prevent_newline_after_colon");
  if (given(body, "random_seed")) {
    if (!body.at("random_seed").is_number_integer()) refuse("random_seed", "random_seed must be integer");
    r.sampling.seed = static_cast<uint64_t>(integer(body, "random_seed", 0, 0, kMaxInt, "random_seed must be a positive integer"));
    r.seeded = true;
  }
  boolean(body, "no_log", false, "no_log must be a boolean value");  // nothing is logged per request
  refuse_unless_off(body, "beam_width", nullptr, "beam search");
  refuse_unless_off(body, "length_penalty", 1, "length_penalty (beam search)");
  if (given(body, "stop_token"))
    r.stop_token = static_cast<int32_t>(integer(body, "stop_token", 0, 0, std::min<int64_t>(vocab_size - 1, kMaxTokenId),
                                                "stop_token must be an integer naming a token of the vocabulary"));
  return r;
}

CompletionRequest parse_openai_request(const json& body, const RequestLimits& limits) {
  refuse_unknown_fields(body, {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "best_of", "stream",
                               "stream_options", "logprobs", "echo", "stop", "seed", "presence_penalty",
                               "frequency_penalty", "logit_bias", "user", "suffix", "ignore_eos"});
  CompletionRequest r;
  r.api = RequestApi::openai;
  if (given(body, "model")) {
    if (!body.at("model").is_string()) refuse("model", "model must be a string");
    r.model = body.at("model").get<std::string>();
  }
  // prompt: a string, a list of strings, a list of token ids, or a list of lists of token ids.
  if (!given(body, "prompt")) refuse("prompt", "prompt is required");
  const json& prompt = body.at("prompt");
  const auto is_ids = [](const json& p) {
    return p.is_array() && std::all_of(p.begin(), p.end(), [](const json& t) {
             return t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() <= kMaxTokenId;
           });
  };
  const std::string shape = "prompt must be a string, a list of strings, a list of token ids or a list of such lists";
  if (prompt.is_string()) {
    r.prompt_texts.push_back(prompt.get<std::string>());
  } else if (!prompt.is_array()) {
    refuse("prompt", shape);
  } else if (!prompt.empty() && prompt.front().is_number()) {
    if (!is_ids(prompt)) refuse("prompt", "prompt token ids must be integers >= 0");
    r.prompt_ids.push_back(prompt.get<std::vector<int32_t>>());
  } else if (std::all_of(prompt.begin(), prompt.end(), [](const json& p) { return p.is_string(); })) {
    for (const json& p : prompt) r.prompt_texts.push_back(p.get<std::string>());
  } else if (std::all_of(prompt.begin(), prompt.end(), is_ids)) {
    for (const json& p : prompt) r.prompt_ids.push_back(p.get<std::vector<int32_t>>());
  } else {
    refuse("prompt", shape);
  }
  if (r.prompt_count() == 0) refuse("prompt", "prompt is an empty list");
  if (static_cast<int64_t>(r.prompt_count()) > limits.max_prompts)
    refuse("prompt", "at most " + std::to_string(limits.max_prompts) + " prompts per request");
  for (const std::string& p : r.prompt_texts)
    if (p.empty()) refuse("prompt", "a prompt is empty");
  for (const std::vector<int32_t>& p : r.prompt_ids)
    if (p.empty()) refuse("prompt", "a prompt is empty");

  r.tokens_to_generate = integer(body, "max_tokens", 16, 0, kMaxInt, "max_tokens must be an integer >= 0");
  read_openai_sampling(body, r);
  integer(body, "best_of", 1, 1, 1, "best_of: only 1 is supported");
  if (given(body, "logprobs")) {
    r.log_probs = true;
    r.top_logprobs = integer(body, "logprobs", 0, 0, limits.max_top_logprobs,
                             "logprobs must be an integer in [0, " + std::to_string(limits.max_top_logprobs) + "]");
  }
  r.echo = boolean(body, "echo", false, "echo must be a boolean");
  refuse_unless_off(body, "suffix", nullptr, "suffix (insertion)");
  read_stream_options(body, r);
  return r;
}

CompletionRequest parse_chat_request(const json& body, const nlohmann::ordered_json& messages, const RequestLimits& limits) {
  refuse_unknown_fields(body, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                               "n", "stream", "stream_options", "logprobs", "top_logprobs", "stop", "seed",
                               "presence_penalty", "frequency_penalty", "logit_bias", "user", "tools", "tool_choice",
                               "parallel_tool_calls", "response_format", "ignore_eos", "add_BOS"});
  CompletionRequest r;
  r.api = RequestApi::chat;
  if (given(body, "model")) {
    if (!body.at("model").is_string()) refuse("model", "model must be a string");
    r.model = body.at("model").get<std::string>();
  }
  // messages: [{"role": "system" | "user" | "assistant" | ..., "content": text or [text parts]}, ...]
  if (!messages.is_array() || messages.empty()) refuse("messages", "messages must be a non-empty list of {role, content}");
  r.messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      refuse("messages", at + " must be an object with a string \"role\"");
    nlohmann::ordered_json message = m;
    if (m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].empty())
      refuse("messages", at + ": tool_calls (function calling) are not supported");
    const auto content = m.contains("content") ? m["content"] : nlohmann::ordered_json();
    if (content.is_array()) {  // content parts: text only, joined
      std::string text;
      for (const auto& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          refuse("messages", at + ": only {\"type\": \"text\", \"text\": ...} content parts are supported");
        text += part["text"].get<std::string>();
      }
      message["content"] = text;
    } else if (content.is_null()) {
      message["content"] = "";
    } else if (!content.is_string()) {
      refuse("messages", at + ": content must be a string or a list of text parts");
    }
    r.messages.push_back(std::move(message));
  }
  const int64_t max_tokens = integer(body, "max_tokens", 16, 0, kMaxInt, "max_tokens must be an integer >= 0");
  r.tokens_to_generate = integer(body, "max_completion_tokens", max_tokens, 0, kMaxInt, "max_completion_tokens must be an integer >= 0");
  read_openai_sampling(body, r);
  r.log_probs = boolean(body, "logprobs", false, "logprobs must be a boolean (top_logprobs says how many alternatives)");
  r.top_logprobs = integer(body, "top_logprobs", 0, 0, limits.max_top_logprobs,
                           "top_logprobs must be an integer in [0, " + std::to_string(limits.max_top_logprobs) + "]");
  if (r.top_logprobs > 0 && !r.log_probs) refuse("top_logprobs", "top_logprobs needs logprobs: true");
  read_stream_options(body, r);
  if (given(body, "tools") && !(body.at("tools").is_array() && body.at("tools").empty()))
    refuse("tools", "tools (function calling) are not supported");
  if (given(body, "tool_choice") && body.at("tool_choice") != "none" && body.at("tool_choice") != "auto")
    refuse("tool_choice", "tool_choice: function calling is not supported");
  boolean(body, "parallel_tool_calls", true, "parallel_tool_calls must be a boolean");
  if (given(body, "response_format") && body.at("response_format") != json{{"type", "text"}})
    refuse("response_format", "response_format: only {\"type\": \"text\"} is supported");
  r.add_bos = boolean(body, "add_BOS", false, "add_BOS must be a boolean");
  return r;
}

}  // namespace mt
