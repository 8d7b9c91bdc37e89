// Owns the chat prompt (see chat_prompt.h).
#include "serve/chat_prompt.h"

#include "base/error.h"
#include "serve/requests.h"

namespace mt {

ChatPrompt::ChatPrompt(const GenerationService& service, const std::string& source) : service_(service) {
  const Tokenizer& t = service.tokenizer();
  const std::string text = source.empty() ? t.chat_template() : source;
  if (text.empty()) return;
  template_ = std::make_unique<JinjaTemplate>(text);
  const auto spelling = [&](std::optional<int64_t> id) {
    if (!id) return std::string();
    const std::vector<int32_t> one = {static_cast<int32_t>(*id)};
    return service.decode(one);
  };
  bos_text_ = spelling(t.bos());
  eos_text_ = spelling(t.eod());
}

std::vector<int32_t> ChatPrompt::tokens(const nlohmann::ordered_json& messages) const {
  if (!template_)
    throw RequestError(400, "messages",
                       "this model has no chat template (its tokenizer carries none): start serve with --chat-template");
  std::string text;
  try {
    text = template_->render({{"messages", messages},
                              {"add_generation_prompt", true},
                              {"bos_token", bos_text_},
                              {"eos_token", eos_text_}});
  } catch (const Error& e) {
    throw RequestError(400, "messages", e.what());
  }
  std::vector<int32_t> ids = service_.encode(text, false);
  const auto bos = service_.tokenizer().bos();
  size_t lead = 0;
  while (bos && lead < ids.size() && ids[lead] == *bos) ++lead;
  ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(lead));
  return ids;
}

}  // namespace mt
