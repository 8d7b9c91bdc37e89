// Owns turning a chat request's messages into the prompt's token ids, as Megatron's chat endpoint
// does: the chat template (serve's --chat-template, else the tokenizer's own) rendered with the
// messages, add_generation_prompt and the tokenizer's bos_token / eos_token spellings; the text
// tokenized without the special tokens a post-processor adds (the template writes its own); then
// leading BOS tokens dropped (admission adds one back when the request asks for add_BOS).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/jinja.h"
#include "serve/service.h"

namespace mt {

class ChatPrompt {
 public:
  // `source`: the template; empty means the tokenizer's, and a model without one answers chat
  // requests with 400. mt::Error for a template that does not parse.
  ChatPrompt(const GenerationService& service, const std::string& source);

  // The prompt's ids. RequestError 400 when there is no template or it raises (its message).
  std::vector<int32_t> tokens(const nlohmann::ordered_json& messages) const;

 private:
  const GenerationService& service_;
  std::unique_ptr<JinjaTemplate> template_;
  std::string bos_text_, eos_text_;
};

}  // namespace mt
