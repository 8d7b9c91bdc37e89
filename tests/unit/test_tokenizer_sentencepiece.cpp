// data/tokenizer_sentencepiece: Megatron's SentencePieceTokenizer / GPTSentencePieceTokenizer /
// Llama2Tokenizer over tiny models trained here with libsentencepiece's trainer: the special
// ids each flavour reports (Megatron's added <CLS> <SEP> <EOD> <MASK> ...), the special-token
// splitting of encode and spacing of decode, round trips, and file errors.
#include <gtest/gtest.h>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/tokenizer.h"
#include "data/tokenizer_sentencepiece.h"
#include "unit/tokenizer_test_util.h"

namespace mt {
namespace {

using test::escaped;
using test::TempDir;

std::vector<std::string> gpt2_corpus() {
  std::ifstream in(std::string(MT_SOURCE_DIR) + "/tests/golden/tokenizer_gpt2_corpus.json");
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str()).get<std::vector<std::string>>();
}

// Two models, trained once per process:
//   plain:  library defaults (unigram, nmt_nfkc, unk 0, bos 1, eos 2, no pad), 150 pieces.
//   exact:  BPE with identity normalisation, white space kept and byte fallback, pad id 3, so any
//           UTF-8 text round-trips.
struct Models {
  TempDir dir;
  std::string plain, exact;
};

const Models& models() {
  static const std::unique_ptr<Models> m = [] {
    auto out = std::make_unique<Models>();
    std::string text;
    const std::vector<std::string> words = {"the", "tokenizer", "Megatron", "model", "data", "train", "hello",
                                            "world", "piece", "sentence", "of", "and", "a", "to", "is"};
    for (int i = 0; i < 3000; ++i) {
      for (int k = 0; k < 8; ++k) text += words[static_cast<size_t>((i * 7 + k * 13 + i / 5) % 15)] + " ";
      text += "\n";
    }
    for (const std::string& line : gpt2_corpus()) text += line + "\n";
    const std::string input = out->dir.write("train.txt", text);
    const auto train = [&](const std::string& name, std::unordered_map<std::string, std::string> kwargs) {
      kwargs["input"] = input;
      kwargs["model_prefix"] = out->dir.file(name);
      kwargs["minloglevel"] = "2";
      const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs);
      EXPECT_TRUE(status.ok()) << status.ToString();
      return out->dir.file(name + ".model");
    };
    out->plain = train("plain", {{"vocab_size", "150"}, {"character_coverage", "0.98"}, {"hard_vocab_limit", "false"}});
    out->exact = train("exact", {{"vocab_size", "600"},
                                 {"model_type", "bpe"},
                                 {"normalization_rule_name", "identity"},
                                 {"remove_extra_whitespaces", "false"},
                                 {"byte_fallback", "true"},
                                 {"character_coverage", "0.99"},
                                 {"pad_id", "3"},
                                 {"hard_vocab_limit", "false"},
                                 {"allow_whitespace_only_pieces", "true"},
                                 {"split_by_whitespace", "false"}});
    return out;
  }();
  return *m;
}

std::vector<int32_t> library_ids(const std::string& model, std::string_view text) {
  sentencepiece::SentencePieceProcessor sp;
  EXPECT_TRUE(sp.Load(model).ok());
  std::vector<int> ids;
  EXPECT_TRUE(sp.Encode(text, &ids).ok());
  return {ids.begin(), ids.end()};
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TokenizerSentencePiece, MegatronSpecialIds) {
  const std::string& model = models().plain;
  const SentencePieceTokenizer tok(model, SentencePieceFlavor::megatron);
  const int64_t n = tok.piece_count();
  ASSERT_GT(n, 20);
  // <CLS> <SEP> <EOD> <MASK> <PAD> are appended; bos/eos are the model's <s> </s>.
  EXPECT_EQ(tok.cls(), n);
  EXPECT_EQ(tok.sep(), n + 1);
  EXPECT_EQ(tok.eod(), n + 2);
  EXPECT_EQ(tok.mask(), n + 3);
  EXPECT_EQ(tok.pad(), n + 4);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.vocab_size(), n + 5);
  const SentencePieceTokenizer extra(model, SentencePieceFlavor::megatron, 3);
  EXPECT_EQ(extra.vocab_size(), n + 8);
  // A model with a pad piece: Megatron reuses it.
  const SentencePieceTokenizer padded(models().exact, SentencePieceFlavor::megatron);
  EXPECT_EQ(padded.pad(), 3);
  EXPECT_EQ(padded.vocab_size(), padded.piece_count() + 4);
}

TEST(TokenizerSentencePiece, GptAndLlamaIds) {
  const std::string& model = models().plain;
  const SentencePieceTokenizer gpt(model, SentencePieceFlavor::gpt);
  EXPECT_EQ(gpt.vocab_size(), gpt.piece_count());
  EXPECT_EQ(gpt.eod(), 2);  // eos
  EXPECT_EQ(gpt.bos(), 1);
  EXPECT_FALSE(gpt.pad().has_value());
  const SentencePieceTokenizer exact(models().exact, SentencePieceFlavor::gpt);
  EXPECT_EQ(exact.pad(), 3);
  const std::string text = "hello world, the tokenizer";
  EXPECT_EQ(gpt.encode(text), library_ids(model, text));
  const SentencePieceTokenizer llama(model, SentencePieceFlavor::llama2);
  EXPECT_EQ(llama.encode(text), concat({{1}, library_ids(model, text)}));
  EXPECT_EQ(llama.eod(), 2);
  EXPECT_THROW(SentencePieceTokenizer(model, SentencePieceFlavor::gpt, 2), Error);
}

TEST(TokenizerSentencePiece, MegatronSplitsAtSpecialTokens) {
  const std::string& model = models().plain;
  const SentencePieceTokenizer tok(model, SentencePieceFlavor::megatron);
  const int32_t eod = static_cast<int32_t>(tok.eod()), cls = static_cast<int32_t>(*tok.cls());
  EXPECT_EQ(tok.encode("hello<EOD>world</s>the"),
            concat({library_ids(model, "hello"), {eod}, library_ids(model, "world"), {2}, library_ids(model, "the")}));
  EXPECT_EQ(tok.encode("<CLS><EOD>"), (std::vector<int32_t>{cls, eod}));
  EXPECT_EQ(tok.encode("hello world"), library_ids(model, "hello world"));
  // detokenize writes each special as " <TOKEN> " between decoded runs.
  EXPECT_EQ(tok.decode(tok.encode("hello<EOD>world")), "hello <EOD> world");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{eod}), " <EOD> ");
}

TEST(TokenizerSentencePiece, RoundTrip) {
  const SentencePieceTokenizer tok(models().exact, SentencePieceFlavor::gpt);
  auto texts = gpt2_corpus();
  texts.push_back("unseen: ꙮ 𓂀 🦩 and  spaces \t\n");
  for (const std::string& text : texts) {
    const auto ids = tok.encode(text);
    ASSERT_EQ(tok.decode(ids), text) << escaped(text);
    for (int32_t id : ids) ASSERT_LT(id, tok.vocab_size());
  }
  // The plain model normalises (NFKC, collapsed spaces) but keeps simple text.
  const SentencePieceTokenizer plain(models().plain, SentencePieceFlavor::gpt);
  EXPECT_EQ(plain.decode(plain.encode("the model is a tokenizer")), "the model is a tokenizer");
  EXPECT_THROW(plain.decode(std::vector<int32_t>{static_cast<int32_t>(plain.vocab_size())}), Error);
}

TEST(TokenizerSentencePiece, Factory) {
  TokenizerOptions options;
  options.type = "SentencePieceTokenizer";
  options.model = models().plain;
  const auto tok = make_tokenizer(options);
  const SentencePieceTokenizer direct(models().plain, SentencePieceFlavor::megatron);
  EXPECT_EQ(tok->eod(), direct.eod());
  EXPECT_EQ(tok->vocab_size(), direct.vocab_size());
  options.type = "GPTSentencePieceTokenizer";
  EXPECT_EQ(make_tokenizer(options)->eod(), 2);
  options.type = "Llama2Tokenizer";
  EXPECT_EQ(make_tokenizer(options)->encode("the").front(), 1);
}

TEST(TokenizerSentencePiece, FileErrors) {
  TempDir dir;
  const auto message = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string missing = dir.file("missing.model");
  std::string m = message([&] { SentencePieceTokenizer(missing, SentencePieceFlavor::megatron); });
  EXPECT_NE(m.find("--tokenizer-model"), std::string::npos) << m;
  EXPECT_NE(m.find("no such file"), std::string::npos) << m;
  const std::string junk = dir.write("junk.model", "this is not a protobuf");
  m = message([&] { SentencePieceTokenizer(junk, SentencePieceFlavor::gpt); });
  EXPECT_NE(m.find("not a SentencePiece model"), std::string::npos) << m;
  TokenizerOptions options;
  options.type = "SentencePieceTokenizer";
  m = message([&] { make_tokenizer(options); });
  EXPECT_NE(m.find("SentencePieceTokenizer needs --tokenizer-model"), std::string::npos) << m;
}

}  // namespace
}  // namespace mt
