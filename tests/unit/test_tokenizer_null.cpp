// data/tokenizer (factory) and data/tokenizer_null: Megatron's NullTokenizer ids, parsing, printing
// and the factory's flag errors.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "data/tokenizer.h"

namespace mt {
namespace {

TokenizerOptions options_of(const std::string& type, std::optional<int64_t> vocab_size = std::nullopt) {
  TokenizerOptions options;
  options.type = type;
  options.vocab_size = vocab_size;
  return options;
}

std::unique_ptr<Tokenizer> null_tokenizer(int64_t vocab_size) {
  return make_tokenizer(options_of("NullTokenizer", vocab_size));
}

TEST(TokenizerNull, SpecialIdsMatchMegatron) {
  const auto tok = null_tokenizer(1000);
  EXPECT_EQ(tok->vocab_size(), 1000);
  EXPECT_EQ(tok->eod(), 999);
  EXPECT_FALSE(tok->bos().has_value());
  EXPECT_FALSE(tok->pad().has_value());
  TokenizerOptions options = options_of("NullTokenizer", 1000);
  options.null_tokenizer_eod_id = 0;
  EXPECT_EQ(make_tokenizer(options)->eod(), 0);
}

TEST(TokenizerNull, EncodeDecode) {
  const auto tok = null_tokenizer(1000);
  EXPECT_EQ(tok->encode("3 1 4 1 5 999"), (std::vector<int32_t>{3, 1, 4, 1, 5, 999}));
  EXPECT_EQ(tok->encode("  7\t8\n9  "), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_TRUE(tok->encode("").empty());
  const std::vector<int32_t> ids{0, 12, 999};
  EXPECT_EQ(tok->decode(ids), "0 12 999");
  EXPECT_EQ(tok->decode({}), "");
  std::vector<int32_t> buffer{7};
  tok->encode_into("1 2", buffer);
  EXPECT_EQ(buffer, (std::vector<int32_t>{7, 1, 2}));
}

TEST(TokenizerNull, BadInputThrows) {
  const auto tok = null_tokenizer(1000);
  EXPECT_THROW(tok->encode("1 two 3"), Error);
  EXPECT_THROW(tok->encode("1000"), Error);
  EXPECT_THROW(tok->encode("-1"), Error);
  EXPECT_THROW(tok->encode("12x"), Error);
  EXPECT_THROW(null_tokenizer(0), Error);
}

TEST(TokenizerFactory, FlagErrors) {
  EXPECT_THROW(make_tokenizer(TokenizerOptions{}), Error);
  EXPECT_THROW(make_tokenizer(options_of("NullTokenizer")), Error);
  try {
    make_tokenizer(options_of("NoSuchTokenizer"));
    FAIL() << "expected mt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NoSuchTokenizer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mt
