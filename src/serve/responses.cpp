#include "serve/responses.h"

#include <algorithm>

#include "serve/service.h"

namespace mt {

using json = nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(int status, const std::string& field, const std::string& message) {
  return {{"error",
           {{"message", message},
            {"type", status >= 500 ? "server_error" : "invalid_request_error"},
            {"param", field.empty() ? json(nullptr) : json(field)},
            {"code", status}}},
          {"message", message}};  // where Megatron's tools/text_generation_cli.py reads it
}

std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stop, bool* cut) {
  size_t at = std::string::npos;
  for (const std::string& s : stop)
    if (!s.empty()) at = std::min(at, text.find(s));
  if (cut) *cut = at != std::string::npos;
  return at == std::string::npos ? text : text.substr(0, at);
}

size_t settled_length(const std::string& text, const std::vector<std::string>& stop) {
  size_t n = text.size();
  for (const std::string& s : stop)  // the longest tail that is a proper prefix of a stop string
    for (size_t k = s.empty() ? 0 : std::min(s.size() - 1, text.size()); k > 0; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        n = std::min(n, text.size() - k);
        break;
      }
  const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD
  while (n >= replacement.size() && text.compare(n - replacement.size(), replacement.size(), replacement) == 0)
    n -= replacement.size();
  // A UTF-8 lead byte within the last three whose character does not fit before n.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (length > back) n -= back;
    break;
  }
  return n;
}

json megatron_response(const GenerationService& service, const CompletionRequest& request,
                       const std::vector<PromptRun>& prompts, const std::vector<GenerationResult>& results) {
  json text = json::array(), segments = json::array(), logprobs = json::array(), tokens = json::array();
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> sequence = prompts[i].tokens;
    sequence.insert(sequence.end(), results[i].tokens.begin(), results[i].tokens.end());
    // As Megatron's: the prompt as sent, then what the generation adds to its text (a BOS the
    // tokenizer put in front is not text the client wrote).
    const std::string whole = service.decode(sequence), head = service.decode(prompts[i].tokens);
    text.push_back(prompts[i].text + (whole.compare(0, head.size(), head) == 0 ? whole.substr(head.size())
                                                                                 : service.decode(results[i].tokens)));
    tokens.push_back(sequence);
    json pieces = json::array();
    for (const int32_t t : sequence) pieces.push_back(service.decode(std::span<const int32_t>(&t, 1)));
    segments.push_back(std::move(pieces));
    std::vector<float> lp = results[i].prompt_log_probs;
    lp.insert(lp.end(), results[i].log_probs.begin(), results[i].log_probs.end());
    logprobs.push_back(lp);
  }
  return {{"text", text},
          {"tokens", tokens},
          {"segments", segments},
          {"logprobs", request.log_probs ? logprobs : json(nullptr)}};
}

OpenAiChoice openai_choice(const GenerationService& service, const CompletionRequest& request,
                           const GenerationResult& result) {
  OpenAiChoice c;
  c.tokens = result.tokens;
  if (result.finish_reason == "eod") c.tokens.pop_back();  // the EOD that ended it is not text
  bool cut = false;
  c.text = cut_at_stop(service.decode(c.tokens), request.stop, &cut);
  if (cut)  // the tokens the cut text still needs
    for (size_t k = 0; k <= c.tokens.size(); ++k)
      if (service.decode(std::span<const int32_t>(c.tokens.data(), k)).size() >= c.text.size()) {
        c.tokens.resize(k);
        break;
      }
  if (cut || result.finish_reason == "eod" || result.finish_reason == "stop")
    c.finish_reason = "stop";
  else if (!result.finish_reason.empty())
    c.finish_reason = "length";
  return c;
}

json openai_logprobs(const GenerationService& service, const CompletionRequest& request, const PromptRun& prompt,
                     const GenerationResult& result, size_t from, size_t to, size_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  const auto add = [&](int32_t token, json logprob, json top_entry) {
    const std::string piece = service.decode(std::span<const int32_t>(&token, 1));
    tokens.push_back(piece);
    token_logprobs.push_back(std::move(logprob));
    top.push_back(std::move(top_entry));
    offsets.push_back(offset);
    offset += piece.size();
  };
  if (request.echo && from == 0)  // the first prompt token has no log-probability: nothing precedes it
    for (size_t i = 0; i < prompt.tokens.size(); ++i)
      add(prompt.tokens[i], i == 0 || i > result.prompt_log_probs.size() ? json(nullptr) : json(result.prompt_log_probs[i - 1]),
          nullptr);
  for (size_t i = from; i < to && i < result.log_probs.size(); ++i) {
    json entry = nullptr;
    if (request.top_logprobs > 0 && i < result.top_log_probs.size()) {
      entry = json::object();
      for (const auto& [token, lp] : result.top_log_probs[i])
        entry[service.decode(std::span<const int32_t>(&token, 1))] = lp;
    }
    add(result.tokens[i], result.log_probs[i], std::move(entry));
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json openai_response(const GenerationService& service, const CompletionRequest& request,
                     const std::vector<PromptRun>& prompts, const std::vector<GenerationResult>& results,
                     const std::string& id, int64_t created, const std::string& model) {
  json choices = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const OpenAiChoice c = openai_choice(service, request, results[i]);
    const std::string lead = request.echo ? prompts[i].text : std::string();
    json choice = {{"index", i}, {"text", lead + c.text}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
    if (request.log_probs)
      choice["logprobs"] = openai_logprobs(service, request, prompts[i], results[i], 0, c.tokens.size(), 0);
    choices.push_back(std::move(choice));
    prompt_tokens += static_cast<int64_t>(prompts[i].tokens.size());
    completion_tokens += static_cast<int64_t>(results[i].tokens.size());
  }
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", choices},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json chat_logprobs(const GenerationService& service, const CompletionRequest& request, const GenerationResult& result,
                   size_t from, size_t to) {
  const auto entry = [&](int32_t token, float logprob) {
    const std::string piece = service.decode(std::span<const int32_t>(&token, 1));
    json bytes = json::array();
    for (const char c : piece) bytes.push_back(static_cast<unsigned char>(c));
    return json{{"token", piece}, {"logprob", logprob}, {"bytes", bytes}};
  };
  json content = json::array();
  for (size_t i = from; i < to && i < result.log_probs.size(); ++i) {
    json e = entry(result.tokens[i], result.log_probs[i]);
    json top = json::array();
    if (request.top_logprobs > 0 && i < result.top_log_probs.size())
      for (const auto& [token, lp] : result.top_log_probs[i]) top.push_back(entry(token, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

json chat_response(const GenerationService& service, const CompletionRequest& request, const PromptRun& prompt,
                   const GenerationResult& result, const std::string& id, int64_t created, const std::string& model) {
  const OpenAiChoice c = openai_choice(service, request, result);
  json choice = {{"index", 0},
                 {"message", {{"role", "assistant"}, {"content", c.text}}},
                 {"logprobs", request.log_probs ? chat_logprobs(service, request, result, 0, c.tokens.size()) : json(nullptr)},
                 {"finish_reason", c.finish_reason}};
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({std::move(choice)})},
          {"usage", usage_json(static_cast<int64_t>(prompt.tokens.size()), static_cast<int64_t>(result.tokens.size()))}};
}

}  // namespace mt
