// data/tokenizer_tiktoken (Megatron's TikTokenizer) on OpenAI's cl100k and o200k vocabularies
// against js-tiktoken, run through node (tools/tokenizer/tiktoken_reference.js) with the same
// layout (special tokens at 0..N-1, rank r at r + N, the vocabulary cut to --vocab-size - N):
// Megatron's v1 and v2 split patterns, and o200k's and cl100k's own (which also check the
// HuggingFaceTokenizer's Split scanners), on the multi-script corpus and seeded random texts, with
// special tokens inside text. Also Megatron's layout rules, both file forms, round trips, the
// cased scanner by hand and file errors. scripts/install-deps.sh installs js-tiktoken and writes the
// vocabularies under third_party/npm/tiktoken; without them these tests fail, they do not skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/split_pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_tiktoken.h"
#include "unit/tokenizer_test_util.h"

namespace mt {
namespace {

using test::escaped;
using test::random_texts;
using test::read_all;
using test::TempDir;

const std::string& k_npm = test::k_npm_dir;
const std::string k_install_hint = "; run scripts/install-deps.sh (it installs js-tiktoken and writes the files)";
const std::vector<std::string> k_specials = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};

struct Case {
  const char* file;     // under third_party/npm/tiktoken
  const char* pattern;  // v1, v2, o200k, cl100k
  int64_t num_special, vocab_size;
};

TikTokenOptions options_of(const Case& c) {
  TikTokenOptions o;
  o.path = k_npm + "/tiktoken/" + c.file;
  const std::string p = c.pattern;
  o.pattern = p == "v1"    ? SplitPattern::tiktoken_v1
              : p == "v2"  ? SplitPattern::tiktoken_v2
              : p == "o200k" ? SplitPattern::o200k
                             : SplitPattern::llama3;  // cl100k's regex is Llama 3's
  o.num_special_tokens = c.num_special;
  o.vocab_size = c.vocab_size;
  return o;
}

struct Reference {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> texts;
};

Reference reference(const Case& c, const std::vector<std::string>& texts) {
  const auto j = test::run_node_reference(
      "tiktoken_reference.js",
      {k_npm + "/node_modules", k_npm + "/tiktoken/" + c.file, c.pattern, std::to_string(c.num_special),
       std::to_string(c.vocab_size), nlohmann::json(k_specials).dump()},
      texts, k_install_hint);
  if (j.is_null()) return {};
  return {j.at("ids").get<std::vector<std::vector<int32_t>>>(), j.at("texts").get<std::vector<std::string>>()};
}

// The corpus, texts with special tokens, and random texts. js-tiktoken spells o200k's (?i:'s) as
// 's|'S, which misses the long s U+017F that Rust's case folding (tiktoken's) matches: texts with
// "'ſ" are left out for that pattern.
std::vector<std::string> texts_for(const std::string& pattern) {
  const std::string path = std::string(MT_SOURCE_DIR) + "/tests/golden/tokenizer_gpt2_corpus.json";
  auto texts = nlohmann::json::parse(read_all(path)).get<std::vector<std::string>>();
  for (const char* t : {"<s>Hello</s> <SPECIAL_7><SPECIAL_10><SPECIAL_1x <pad>", "HELLOworld HELLO world Hello",
                        "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E x", "e\xCC\x81t\xC3\xA9 \xCC\x81\xCC\x81 a/b//c\n/",
                        "I'M HERE, you're 'Sup 'LL", "\xE6\x97\xA5\xE6\x9C\xAC" "AB x E\xCC\x81" "AB y .\n/ x", "1234567 \xD9\xA1\xD9\xA2\xD9\xA3", "", " ", "\r\n\r\n  x"})
    texts.emplace_back(t);
  for (std::string& t : random_texts(1200, 424242)) texts.push_back(std::move(t));
  if (pattern == "o200k") std::erase_if(texts, [](const std::string& t) { return t.find("'\xC5\xBF") != std::string::npos; });
  return texts;
}

class TikToken : public ::testing::TestWithParam<Case> {};

TEST_P(TikToken, MatchesJsTiktoken) {
  const Case& c = GetParam();
  std::unique_ptr<TikTokenizer> tok;
  ASSERT_NO_THROW(tok = std::make_unique<TikTokenizer>(options_of(c))) << k_install_hint;
  const auto texts = texts_for(c.pattern);
  const Reference ref = reference(c, texts);
  ASSERT_EQ(ref.ids.size(), texts.size());
  int failures = 0;
  for (size_t i = 0; i < texts.size() && failures < 5; ++i) {
    const std::vector<int32_t> got = tok->encode(texts[i]);
    if (got != ref.ids[i]) {
      ++failures;
      size_t k = 0;
      while (k < got.size() && k < ref.ids[i].size() && got[k] == ref.ids[i][k]) ++k;
      ADD_FAILURE() << "text " << i << " '" << escaped(texts[i]) << "': first difference at token " << k << ": ours "
                    << (k < got.size() ? std::to_string(got[k]) + " '" + escaped(tok->token_bytes(got[k])) + "'" : "(end)")
                    << ", JS "
                    << (k < ref.ids[i].size() ? std::to_string(ref.ids[i][k]) + " '" + escaped(tok->token_bytes(ref.ids[i][k])) + "'" : "(end)");
    } else if (tok->decode(got) != ref.texts[i] && texts[i].find('\xEF') == std::string::npos) {
      // (JS's TextDecoder drops a leading BOM, U+FEFF, which Python's decode keeps.)
      ++failures;
      ADD_FAILURE() << "text " << i << " decodes to '" << escaped(tok->decode(got)) << "', JS '" << escaped(ref.texts[i]) << "'";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TikToken,
                         ::testing::Values(Case{"o200k_megatron.json", "v2", 1000, 131072},
                                           Case{"o200k_megatron.json", "v1", 1000, 131072},
                                           Case{"o200k_base.tiktoken", "o200k", 7, 200005},
                                           Case{"cl100k_base.tiktoken", "cl100k", 1000, 101256}),
                         [](const auto& info) { return std::string(info.param.pattern); });

TEST(TikTokenLayout, SpecialIdsCutAndFactory) {
  TokenizerOptions o;
  o.type = "TikTokenizer";
  o.model = k_npm + "/tiktoken/o200k_megatron.json";
  const auto tok = make_tokenizer(o);  // Megatron's defaults: v2, 1000 specials, 131072 ids
  EXPECT_EQ(tok->vocab_size(), 131072);
  EXPECT_EQ(tok->eod(), 2);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->pad(), 4);
  EXPECT_EQ(tok->encode("<s>"), (std::vector<int32_t>{1}));
  EXPECT_EQ(tok->encode("<SPECIAL_999>"), (std::vector<int32_t>{999}));
  EXPECT_EQ(tok->encode("A"), (std::vector<int32_t>{1000 + 'A'}));  // the bytes come first, rank = byte
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 1000 + 'h', 1000 + 'i', 2}), "<s>hi</s>");
  // A custom list puts its tokens first and must keep Megatron's seven.
  o.special_tokens = {"<s>", "<unk>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>", "<|im_start|>"};
  o.tiktoken_num_special_tokens = 10;
  o.vocab_size = 1000;
  const auto custom = make_tokenizer(o);
  EXPECT_EQ(custom->bos(), 0);
  EXPECT_EQ(custom->encode("<|im_start|>A"), (std::vector<int32_t>{7, 10 + 'A'}));
  EXPECT_EQ(custom->vocab_size(), 1000);
  o.special_tokens = {"<s>", "</s>"};
  EXPECT_THROW(make_tokenizer(o), Error);  // <unk>, ... missing
  o.special_tokens.clear();
  o.tiktoken_num_special_tokens = 5;  // fewer than the seven
  EXPECT_THROW(make_tokenizer(o), Error);
  o.tiktoken_num_special_tokens = 1000;
  o.vocab_size = 500000;  // more than the file has
  EXPECT_THROW(make_tokenizer(o), Error);
  o.vocab_size.reset();
  o.tiktoken_pattern = "v3";
  EXPECT_THROW(make_tokenizer(o), Error);
}

TEST(TikTokenLayout, BothFileFormsGiveTheSameTokens) {
  // o200k's ranks as OpenAI's file and reordered as Megatron's (bytes first): multi-byte tokens keep
  // their order, so the same text gives the same token bytes.
  TikTokenOptions megatron = options_of({"o200k_megatron.json", "v2", 1000, 200998});
  TikTokenOptions openai = options_of({"o200k_base.tiktoken", "v2", 1000, 200998});
  const TikTokenizer a(megatron), b(openai);
  for (const std::string& t : random_texts(200, 9)) {
    const auto ia = a.encode(t), ib = b.encode(t);
    ASSERT_EQ(ia.size(), ib.size()) << escaped(t);
    for (size_t k = 0; k < ia.size(); ++k) EXPECT_EQ(a.token_bytes(ia[k]), b.token_bytes(ib[k]));
    EXPECT_EQ(a.decode(ia), t);
  }
}

std::vector<std::string> split(std::string_view text, SplitPattern pattern) {
  SplitPreTokenizer s(text, pattern);
  std::vector<std::string> out;
  for (std::string_view piece; s.next(piece);) out.emplace_back(piece);
  return out;
}

TEST(TikTokenSplit, CasedAlternativesByHand) {
  using V = std::vector<std::string>;
  const auto V2 = SplitPattern::tiktoken_v2, O = SplitPattern::o200k;
  EXPECT_EQ(split("HELLOworld HELLO world", V2), (V{"HELLOworld", " HELLO", " world"}));
  EXPECT_EQ(split("camelCaseWord", V2), (V{"camel", "Case", "Word"}));
  EXPECT_EQ(split("\xE6\x97\xA5\xE6\x9C\xAC x", V2), (V{"\xE6\x97\xA5\xE6\x9C\xAC", " x"}));  // Lo: U* gives one back to W+
  // U* takes 日本AB, W+ finds nothing after it, U* gives back B and A (not W) and 本 (W), which W+ takes.
  EXPECT_EQ(split("\xE6\x97\xA5\xE6\x9C\xAC" "AB x", V2), (V{"\xE6\x97\xA5\xE6\x9C\xAC", "AB", " x"}));
  EXPECT_EQ(split("a/b//\n", V2), (V{"a", "/b", "//\n"}));
  EXPECT_EQ(split("12345", V2), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("12345", O), (V{"123", "45"}));
  EXPECT_EQ(split("don't YOU'RE", O), (V{"don't", " YOU'RE"}));
  EXPECT_EQ(split("don't", V2), (V{"don", "'t"}));
  EXPECT_EQ(split("x \xCC\x81y", V2), (V{"x", " \xCC\x81y"}));  // a mark is U and W
  EXPECT_EQ(split("don't 's", SplitPattern::tiktoken_v1), (V{"don", "'t", " '", "s"}));
}

TEST(TikTokenErrors, BadFilesAreNamed) {
  TempDir dir;
  const auto expect_refused = [&](const std::string& name, const std::string& content, const std::string& message) {
    TikTokenOptions o;
    o.path = dir.write(name, content);
    o.num_special_tokens = 7;
    o.vocab_size = 7 + 256;
    try {
      TikTokenizer tok(o);
      ADD_FAILURE() << "accepted " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_refused("a.json", "{", "not valid JSON");
  expect_refused("b.json", R"([{"rank": 0, "token_bytes": "AQ==", "token_str": "x"}])", "must be the single byte 0");
  expect_refused("c.json", R"([{"rank": 0, "token_bytes": "AA==", "token_str": ""}])", "has 1 tokens");
  expect_refused("d.tiktoken", "AA== 0\nnot-a-line\n", "line 2");
  expect_refused("e.tiktoken", "AA== 0\nAQ== 2\n", "rank 1 is missing");
  TikTokenOptions missing;
  missing.path = dir.file("nope.json");
  EXPECT_THROW(TikTokenizer tok(missing), Error);
}

}  // namespace
}  // namespace mt
