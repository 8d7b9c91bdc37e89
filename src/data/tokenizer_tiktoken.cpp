// Owns loading tiktoken vocabularies and the TikTokenizer encode/decode loops (see
// tokenizer_tiktoken.h).
#include "data/tokenizer_tiktoken.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "data/bpe.h"
#include "data/tokenizer_files.h"
#include "data/unicode.h"

namespace mt {
namespace {

constexpr const char* k_type = "TikTokenizer";
const std::vector<std::string> k_default_specials = {"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"};

uint64_t next_instance_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

// The vocabulary's tokens in rank order (rank r at index r), cut to `count`.
std::vector<std::string> read_ranks(const std::string& path, size_t count) {
  const std::string text = read_tokenizer_file(path, "--tokenizer-model", k_type);
  std::vector<std::string> tokens;
  const auto fail = [&](const std::string& where) { MT_FAIL() << "--tokenizer-model " << path << ": " << where; };
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    // Megatron's form: [{"rank": i, "token_bytes": base64, "token_str": ...}, ...], bytes first.
    nlohmann::json list;
    try {
      list = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("not valid JSON (") + e.what() + ")");
    }
    if (!list.is_array()) fail("expected a JSON list of {rank, token_bytes, token_str}");
    for (size_t i = 0; i < list.size() && tokens.size() < count; ++i) {
      const nlohmann::json& entry = list[i];
      std::string bytes;
      if (!entry.is_object() || entry.size() != 3 || !entry.contains("token_str") || !entry.contains("rank") ||
          !entry["rank"].is_number_integer() || entry["rank"].get<int64_t>() != static_cast<int64_t>(i) ||
          !entry.contains("token_bytes") || !entry["token_bytes"].is_string() ||
          !decode_base64(entry["token_bytes"].get<std::string>(), bytes))
        fail("entry " + std::to_string(i) + " is not {\"rank\": " + std::to_string(i) +
             ", \"token_bytes\": base64, \"token_str\": ...}");
      if (i < 256 && bytes != std::string(1, static_cast<char>(i)))
        fail("entry " + std::to_string(i) + " must be the single byte " + std::to_string(i) + " (Megatron's layout)");
      tokens.push_back(std::move(bytes));
    }
  } else {
    // OpenAI's .tiktoken form: "base64 rank" per line, ranks 0, 1, 2, ... in any order.
    std::vector<std::pair<int64_t, std::string>> ranked;
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      const size_t space = line.find(' ');
      std::string bytes;
      int64_t rank = -1;
      try {
        if (space != std::string_view::npos) rank = std::stoll(std::string(line.substr(space + 1)));
      } catch (const std::exception&) {
      }
      if (space == std::string_view::npos || rank < 0 || !decode_base64(line.substr(0, space), bytes))
        fail("line " + std::to_string(line_no) + " is not \"base64 rank\"; expected Megatron's .json list or a .tiktoken file");
      if (static_cast<size_t>(rank) < count) ranked.emplace_back(rank, std::move(bytes));
    }
    std::sort(ranked.begin(), ranked.end());
    for (size_t i = 0; i < ranked.size(); ++i)
      if (ranked[i].first != static_cast<int64_t>(i)) fail("rank " + std::to_string(i) + " is missing or repeated");
    for (auto& [rank, bytes] : ranked) tokens.push_back(std::move(bytes));
  }
  MT_CHECK(tokens.size() == count) << "--tokenizer-model " << path << " has " << tokens.size() << " tokens, but --vocab-size "
                                   << "minus --tiktoken-num-special-tokens asks for " << count;
  return tokens;
}

struct ThreadState {
  uint64_t owner = 0;
  BpeCache cache;
  std::vector<int32_t> scratch;
};

}  // namespace

SplitPattern tiktoken_pattern(const std::string& name) {
  if (name == "v1") return SplitPattern::tiktoken_v1;
  if (name == "v2") return SplitPattern::tiktoken_v2;
  MT_FAIL() << "--tiktoken-pattern " << name << ": expected v1 or v2";
}

struct TikTokenizer::Impl {
  SplitPattern pattern;
  int32_t num_special = 0;
  std::vector<std::string> bytes;  // id -> bytes (special tokens: their text)
  std::unordered_map<std::string_view, int32_t> ids;  // vocabulary bytes -> id (views into `bytes`)
  std::array<std::vector<int32_t>, 256> specials_by_first_byte;  // in id order: regex alternation order
  std::unique_ptr<BpeMerges> merges;
  uint64_t instance_id = next_instance_id();
};

TikTokenizer::TikTokenizer(const TikTokenOptions& o) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.pattern = o.pattern;
  std::vector<std::string> specials = o.special_tokens.empty() ? k_default_specials : o.special_tokens;
  MT_CHECK(std::unordered_set<std::string>(specials.begin(), specials.end()).size() == specials.size())
      << "--tokenizer-special-tokens: the special tokens must be unique";
  for (const std::string& needed : k_default_specials)
    MT_CHECK(std::find(specials.begin(), specials.end(), needed) != specials.end())
        << "--tokenizer-special-tokens must include " << needed << " (" << k_type << " needs <unk> <s> </s> <mask> <pad> <cls> <sep>)";
  MT_CHECK(static_cast<int64_t>(specials.size()) <= o.num_special_tokens && o.num_special_tokens < o.vocab_size)
      << k_type << " needs " << specials.size() << " special tokens <= --tiktoken-num-special-tokens ("
      << o.num_special_tokens << ") < --vocab-size (" << o.vocab_size << ")";
  MT_CHECK(o.vocab_size < (int64_t{1} << 30)) << "--vocab-size " << o.vocab_size << " is too large";
  for (auto i = static_cast<int64_t>(specials.size()); i < o.num_special_tokens; ++i)
    specials.push_back("<SPECIAL_" + std::to_string(i) + ">");
  MT_CHECK(!o.path.empty()) << "--tokenizer-type " << k_type << " needs --tokenizer-model (a .json or .tiktoken vocabulary)";
  std::vector<std::string> ranked = read_ranks(o.path, static_cast<size_t>(o.vocab_size - o.num_special_tokens));

  m.num_special = static_cast<int32_t>(o.num_special_tokens);
  m.bytes = std::move(specials);
  for (std::string& token : ranked) m.bytes.push_back(std::move(token));
  for (int32_t id = 0; id < m.num_special; ++id) {
    MT_CHECK(!m.bytes[static_cast<size_t>(id)].empty()) << "--tokenizer-special-tokens: an empty special token";
    m.specials_by_first_byte[static_cast<unsigned char>(m.bytes[static_cast<size_t>(id)][0])].push_back(id);
  }
  m.ids.reserve(m.bytes.size());
  for (auto id = static_cast<size_t>(m.num_special); id < m.bytes.size(); ++id)
    MT_CHECK(m.ids.emplace(m.bytes[id], static_cast<int32_t>(id)).second)
        << "--tokenizer-model " << o.path << ": rank " << id - static_cast<size_t>(m.num_special) << " repeats a token";

  // tiktoken merges the adjacent pair whose concatenation has the lowest rank: as a merge table,
  // every split of every token into two tokens, ranked by the whole token.
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const auto it = m.ids.find(std::string_view(&byte, 1));
    MT_CHECK(it != m.ids.end()) << "--tokenizer-model " << o.path << ": no token for the byte " << b;
    byte_ids[static_cast<size_t>(b)] = it->second;
  }
  std::vector<BpeMerges::Merge> list;
  for (auto id = static_cast<size_t>(m.num_special); id < m.bytes.size(); ++id) {
    const std::string_view token = m.bytes[id];
    for (size_t k = 1; k < token.size(); ++k) {
      const auto left = m.ids.find(token.substr(0, k)), right = m.ids.find(token.substr(k));
      if (left != m.ids.end() && right != m.ids.end())
        list.push_back({left->second, right->second, static_cast<int32_t>(id), static_cast<uint32_t>(id)});
    }
  }
  m.merges = std::make_unique<BpeMerges>(byte_ids, list);
  vocab_size_ = o.vocab_size;
  const auto special_id = [&](const char* name) {
    return static_cast<int64_t>(std::find(m.bytes.begin(), m.bytes.begin() + m.num_special, name) - m.bytes.begin());
  };
  eod_ = special_id("</s>");
  bos_ = special_id("<s>");
  pad_ = special_id("<pad>");
}

TikTokenizer::~TikTokenizer() = default;

void TikTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& m = *impl_;
  thread_local ThreadState state;
  if (state.owner != m.instance_id) {
    state.cache.clear();
    state.owner = m.instance_id;
  }
  const std::hash<std::string_view> hasher;
  const auto encode_ordinary = [&](std::string_view part) {
    SplitPreTokenizer pieces(part, m.pattern);
    for (std::string_view piece; pieces.next(piece);) {
      if (const auto it = m.ids.find(piece); it != m.ids.end()) {
        out.push_back(it->second);
        continue;
      }
      const size_t hash = hasher(piece);
      if (state.cache.lookup(piece, hash, out)) continue;
      const size_t before = out.size();
      m.merges->encode_word(piece, out, state.scratch);
      state.cache.insert(piece, hash, out.data() + before, out.size() - before);
    }
  };
  size_t start = 0;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    for (const int32_t id : m.specials_by_first_byte[static_cast<unsigned char>(text[pos])]) {
      const std::string& special = m.bytes[static_cast<size_t>(id)];
      if (text.compare(pos, special.size(), special) != 0) continue;
      encode_ordinary(text.substr(start, pos - start));
      out.push_back(id);
      start = pos + special.size();
      pos = start - 1;
      break;
    }
  }
  encode_ordinary(text.substr(start));
}

std::string_view TikTokenizer::token_bytes(int32_t id) const {
  MT_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->bytes.size())
      << k_type << ": token id " << id << " is not in the vocabulary (size " << vocab_size_ << ")";
  return impl_->bytes[static_cast<size_t>(id)];
}

std::string TikTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (const int32_t id : ids) bytes.append(token_bytes(id));
  return utf8_replace_invalid(bytes);
}

}  // namespace mt
