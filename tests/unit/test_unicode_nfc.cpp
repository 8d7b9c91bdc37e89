// data/unicode_nfc: normalization form C by hand on the cases UAX #15 describes (composition,
// canonical reordering, blocking, singletons, composition exclusions, Hangul), and against
// JavaScript's String.normalize('NFC') (tools/tokenizer/nfc_reference.js) on random texts rich in
// combining marks. Ill-formed bytes pass through.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/unicode_nfc.h"
#include "unit/tokenizer_test_util.h"

namespace mt {
namespace {

TEST(UnicodeNfc, CasesByHand) {
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                       // e + acute -> é
  EXPECT_EQ(nfc("\xC3\xA9"), "\xC3\xA9");                         // already composed
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");    // acute (230) after dot below (220): ạ + acute
  EXPECT_EQ(nfc("\xE2\x84\xA6"), "\xCE\xA9");                     // OHM SIGN is a singleton: Ω
  EXPECT_EQ(nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");     // DEVANAGARI QA is excluded: stays decomposed
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("\xEA\xB0\x81"), "\xEA\xB0\x81");
  EXPECT_EQ(nfc("a\xCC\x81\xCC\x81"), "\xC3\xA1\xCC\x81");        // the second acute is blocked by the first
  EXPECT_EQ(nfc("\xCC\x81" "e"), "\xCC\x81" "e");                 // a leading mark has no starter
  EXPECT_EQ(nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");               // a bad byte passes and blocks
}

TEST(UnicodeNfc, MatchesJavaScriptOnRandomTexts) {
  std::vector<std::string> texts = test::random_texts(2000, 15);
  // Marks after letters of many scripts, in scrambled orders.
  const char* marks[] = {"\xCC\x81", "\xCC\xA3", "\xCC\x88", "\xCC\x80", "\xCD\x85", "\xCC\xA7", "\xE0\xA4\xBC", "\xE3\x82\x99"};
  const char* bases[] = {"a", "e", "o", "u", "A", "\xCE\xB1", "\xCF\x89", "\xE0\xA4\x95", "\xE3\x81\x8B", "\xE1\x84\x80\xE1\x85\xA1"};
  for (int i = 0; i < 500; ++i) {
    std::string t;
    for (int k = 0; k < 12; ++k) {
      t += bases[(i * 7 + k * 3) % 10];
      for (int m = 0; m < (i + k) % 4; ++m) t += marks[(i * 5 + k + m * 3) % 8];
    }
    texts.push_back(t);
  }
  const auto expected = test::run_node_reference("nfc_reference.js", {}, texts, "; node is needed (scripts/install-deps.sh)");
  ASSERT_TRUE(expected.is_array());
  ASSERT_EQ(expected.size(), texts.size());
  int failures = 0;
  for (size_t i = 0; i < texts.size() && failures < 5; ++i)
    if (nfc(texts[i]) != expected[i].get<std::string>()) {
      ++failures;
      ADD_FAILURE() << "text " << i << " '" << test::escaped(texts[i]) << "': ours '" << test::escaped(nfc(texts[i]))
                    << "', JS '" << test::escaped(expected[i].get<std::string>()) << "'";
    }
}

}  // namespace
}  // namespace mt
