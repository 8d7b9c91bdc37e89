// data/jinja (the chat-template subset) against @huggingface/jinja, run through node
// (tools/tokenizer/chat_reference.js): the templates of five families (Llama 3, Mistral, ChatML /
// Qwen2, Gemma, Nemotron; tests/golden/chat_templates.json) and one that exercises every construct
// of the subset, each rendered for several conversations (system prompts, several turns, unicode and
// white space in the content, add_generation_prompt on and off) byte for byte, errors
// (raise_exception) included. Also by-hand cases of the environment (trim_blocks, lstrip_blocks,
// whitespace control) and refusals of what is not implemented.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/jinja.h"
#include "unit/tokenizer_test_util.h"

namespace mt {
namespace {

using json = nlohmann::ordered_json;
using test::escaped;
using test::read_all;

const std::string k_install_hint = "; run scripts/install-deps.sh (it installs @huggingface/jinja)";

std::vector<json> conversations() {
  return {
      json::array({{{"role", "system"}, {"content", "You are terse. /think"}},
                   {{"role", "user"}, {"content", "Hi there!"}},
                   {{"role", "assistant"}, {"content", "  Hello.  "}},
                   {{"role", "user"}, {"content", "Translate 'chat' → français, 日本語 🦙\nplease"}}}),
      json::array({{{"role", "user"}, {"content", "One question?"}}}),
      json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", "b"}},
                   {{"role", "user"}, {"content", "c\t\n"}}, {{"role", "assistant"}, {"content", "\td"}}}),
      json::array({{{"role", "assistant"}, {"content", "out of turn"}}}),
  };
}

std::string render_or_error(const std::string& source, const json& context) {
  try {
    return JinjaTemplate(source).render(context);
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

TEST(Jinja, ChatTemplatesMatchHuggingFaceJinja) {
  const auto templates = nlohmann::ordered_json::parse(read_all(std::string(MT_SOURCE_DIR) + "/tests/golden/chat_templates.json"));
  ASSERT_GE(templates.size(), 6u);
  json cases = json::array();
  std::vector<std::string> names;
  for (const auto& [name, source] : templates.items())
    for (const json& messages : conversations())
      for (const bool generation : {false, true}) {
        cases.push_back({{"template", source},
                         {"context", {{"messages", messages}, {"add_generation_prompt", generation}, {"bos_token", "<s>"},
                                      {"eos_token", "</s>"}}}});
        names.push_back(name + " conversation " + std::to_string(names.size() % 8 / 2) + (generation ? " +gen" : ""));
      }
  const json expected = test::run_node_reference(
      "chat_reference.js", {std::string(MT_SOURCE_DIR) + "/third_party/npm/node_modules"}, cases, k_install_hint);
  ASSERT_EQ(expected.size(), cases.size());
  int errors = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string ours = render_or_error(cases[i]["template"], cases[i]["context"]);
    if (expected[i].contains("error")) {
      ++errors;
      EXPECT_EQ(ours.rfind("error: ", 0), 0u) << names[i] << ": JS raised '" << expected[i]["error"] << "', we rendered '"
                                              << escaped(ours) << "'";
      // raise_exception's message is ours too.
      const std::string js = expected[i]["error"];
      if (js.find("alternate") != std::string::npos) {
        EXPECT_NE(ours.find("alternate"), std::string::npos) << ours;
      }
    } else {
      EXPECT_EQ(ours, expected[i]["text"].get<std::string>()) << names[i];
    }
  }
  EXPECT_GE(errors, 4);  // Mistral and Gemma refuse a conversation that starts with the assistant
}

TEST(Jinja, EnvironmentAndWhitespaceControlByHand) {
  const json none = json::object();
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(JinjaTemplate("{% if true %}\n  yes\n  {% endif %}\nend\n").render(none), "  yes\nend");
  EXPECT_EQ(JinjaTemplate("a  {{- ' b ' -}}  c").render(none), "a b c");
  EXPECT_EQ(JinjaTemplate("a {# note #}\nb").render(none), "a b");
  EXPECT_EQ(JinjaTemplate("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'a' ~ 'b' | upper }} {{ not 1 == 2 }}").render(none),
            "7 9 aB True");
  EXPECT_EQ(JinjaTemplate("{% for x in [1,2,3] %}{% set y = x %}{% endfor %}{{ y is defined }}").render(none),
            "False");  // a loop's set stays in the loop
  EXPECT_EQ(JinjaTemplate("{{ messages[0]['content'] }}").render({{"messages", {{{"content", "hi"}}}}}), "hi");
}

TEST(Jinja, UnsupportedConstructsAreNamed) {
  const auto message_of = [](const std::string& source) {
    try {
      JinjaTemplate(source).render(json::object());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message_of("{% macro f() %}x{% endmacro %}").find("{% macro %} is not implemented"), std::string::npos);
  EXPECT_NE(message_of("{{ 'x' | wordwrap }}").find("the filter 'wordwrap' is not implemented"), std::string::npos);
  EXPECT_NE(message_of("{{ 1 is prime }}").find("the test 'prime' is not implemented"), std::string::npos);
  EXPECT_NE(message_of("{% if true %}x").find("missing {% end"), std::string::npos);
  EXPECT_NE(message_of("{{ raise_exception('stop here') }}").find("stop here"), std::string::npos);
  EXPECT_NE(message_of("{{ 'a' + 1 }}").find("unsupported operands"), std::string::npos);
  EXPECT_NE(message_of("line1\n{{ 'x' }\n").find("line 2"), std::string::npos);
}

}  // namespace
}  // namespace mt
