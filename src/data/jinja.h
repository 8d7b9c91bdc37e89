// Owns a Jinja subset large enough for the chat templates Hugging Face tokenizers ship (Llama 3,
// Mistral, Qwen2 / ChatML, Gemma, Nemotron): text with {{ expressions }}, {% statements %} and
// {# comments #}, whitespace control (-) and Hugging Face's environment (trim_blocks,
// lstrip_blocks, one trailing newline dropped); statements if/elif/else, for (with an `if` filter,
// `else`, tuple targets and `loop`) and set (also of `namespace` attributes), but not macros, calls
// or filter blocks; expressions with Jinja's operators, tests, filters and the string and dict
// methods templates call; globals raise_exception, namespace, range and strftime_now. Something a template uses that is not
// implemented is refused when the template is parsed or rendered, by name.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace mt {

namespace jinja {
struct Node;
}

class JinjaTemplate {
 public:
  // Parses `source`; mt::Error naming the construct and its line for an unsupported or malformed one.
  explicit JinjaTemplate(const std::string& source);
  ~JinjaTemplate();

  // Renders with the variables of `context` (a JSON object; ordered, so that dicts keep the key
  // order they arrived in, as Python's do). mt::Error for a runtime failure or a raise_exception,
  // with its message.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::shared_ptr<const jinja::Node> root_;
};

}  // namespace mt
