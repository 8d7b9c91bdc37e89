// Owns loading GPT-2's vocab and merges files and the GPT2BPETokenizer encode/decode loops
// (see tokenizer_gpt2.h).
#include "data/tokenizer_gpt2.h"

#include <atomic>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.h"
#include "data/gpt2_pretokenize.h"
#include "data/tokenizer_files.h"
#include "data/unicode.h"

namespace mt {

const std::array<uint32_t, 256>& gpt2_byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : 256 + n++;
    }
    return t;
  }();
  return table;
}

bool gpt2_unicode_to_bytes(std::string_view spelled, std::string& bytes) {
  static const std::array<int16_t, 512> inverse = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[gpt2_byte_to_unicode()[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return t;
  }();
  bytes.clear();
  for (size_t pos = 0; pos < spelled.size();) {
    const Utf8Step step = utf8_next(spelled, pos);
    if (!step.valid || step.code_point >= inverse.size() || inverse[step.code_point] < 0) return false;
    bytes.push_back(static_cast<char>(inverse[step.code_point]));
    pos += step.length;
  }
  return true;
}

namespace {

constexpr const char* k_type = "GPT2BPETokenizer";

uint64_t next_instance_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file)
    : instance_id_(next_instance_id()) {
  check_tokenizer_file(merge_file, "--merge-file", k_type);
  const std::string vocab_text = read_tokenizer_file(vocab_file, "--vocab-file", k_type);
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_text);
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << "--vocab-file " << vocab_file << ": not valid JSON (" << e.what() << ")";
  }
  MT_CHECK(vocab.is_object() && !vocab.empty())
      << "--vocab-file " << vocab_file << ": expected a JSON object {token: id, ...}";

  // Byte strings -> ids: the vocab first, then (below) merge results the vocab lacks, which get
  // ids past the vocab so the merge loop can carry them; a word ending on one is an error.
  std::unordered_map<std::string, int32_t> ids;
  std::string bytes;
  int64_t max_id = -1;
  for (const auto& [token, value] : vocab.items()) {
    MT_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < (int64_t{1} << 30))
        << "--vocab-file " << vocab_file << ": token " << token << " has id " << value.dump()
        << "; ids must be integers in [0, 2^30)";
    MT_CHECK(gpt2_unicode_to_bytes(token, bytes))
        << "--vocab-file " << vocab_file << ": token " << token
        << " is not spelled in GPT-2's byte-to-unicode alphabet; is this a byte-level BPE vocab?";
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    ids[bytes] = id;
    max_id = std::max<int64_t>(max_id, id);
  }
  vocab_size_ = static_cast<int64_t>(vocab.size());
  id_to_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  id_defined_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [b, id] : ids) {
    id_to_bytes_[static_cast<size_t>(id)] = b;
    id_defined_[static_cast<size_t>(id)] = true;
  }
  const auto eod = ids.find("<|endoftext|>");
  MT_CHECK(eod != ids.end()) << "--vocab-file " << vocab_file << ": no \"<|endoftext|>\" token, which "
                             << k_type << " uses as its end-of-document id";
  eod_ = eod->second;
  std::array<int32_t, 256> byte_ids{};
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(std::string(1, static_cast<char>(b)));
    MT_CHECK(it != ids.end()) << "--vocab-file " << vocab_file << ": no token for byte " << b
                              << "; a byte-level BPE vocab has all 256";
    byte_ids[static_cast<size_t>(b)] = it->second;
  }

  // Megatron reads merges as text.split('\n')[1:-1]: the first line (#version) and whatever
  // follows the last newline are not merges.
  const std::string merges_text = read_tokenizer_file(merge_file, "--merge-file", k_type);
  struct Line {
    std::string left, right;
    uint32_t rank;
  };
  std::vector<Line> lines;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  size_t pos = merges_text.find('\n');
  uint32_t line_no = 1;
  while (pos != std::string::npos) {
    const size_t begin = pos + 1, end = merges_text.find('\n', begin);
    if (end == std::string::npos) break;
    ++line_no;
    std::string_view line(merges_text.data() + begin, end - begin);
    std::vector<std::string_view> parts;
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && is_space(line[i])) ++i;
      size_t j = i;
      while (j < line.size() && !is_space(line[j])) ++j;
      if (j > i) parts.push_back(line.substr(i, j - i));
      i = j;
    }
    pos = end;
    if (parts.empty()) continue;
    MT_CHECK(parts.size() == 2) << "--merge-file " << merge_file << " line " << line_no
                                << ": expected two tokens separated by a space, got '" << line << "'";
    Line parsed{"", "", line_no};
    MT_CHECK(gpt2_unicode_to_bytes(parts[0], parsed.left) && gpt2_unicode_to_bytes(parts[1], parsed.right))
        << "--merge-file " << merge_file << " line " << line_no
        << ": not spelled in GPT-2's byte-to-unicode alphabet";
    lines.push_back(std::move(parsed));
  }
  int32_t next_virtual = static_cast<int32_t>(max_id + 1);
  for (const Line& l : lines) {
    if (ids.emplace(l.left + l.right, next_virtual).second) ++next_virtual;
  }
  std::vector<BpeMerges::Merge> merges;
  merges.reserve(lines.size());
  for (const Line& l : lines) {
    const auto left = ids.find(l.left), right = ids.find(l.right);
    if (left == ids.end() || right == ids.end()) continue;  // never applies: a part never exists
    merges.push_back({left->second, right->second, ids.at(l.left + l.right), l.rank});
  }
  merges_ = std::make_unique<BpeMerges>(byte_ids, merges);
}

namespace {
// Each thread's word cache and scratch, for one tokenizer at a time.
struct ThreadState {
  uint64_t owner = 0;
  BpeCache cache;
  std::vector<int32_t> scratch;
};
}  // namespace

void Gpt2BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  thread_local ThreadState state;
  if (state.owner != instance_id_) {
    state.cache.clear();
    state.owner = instance_id_;
  }
  Gpt2PreTokenizer pieces(text);
  std::string_view piece;
  const std::hash<std::string_view> hasher;
  while (pieces.next(piece)) {
    const size_t hash = hasher(piece);
    if (state.cache.lookup(piece, hash, out)) continue;
    const size_t before = out.size();
    merges_->encode_word(piece, out, state.scratch);
    for (size_t i = before; i < out.size(); ++i) {
      const auto id = static_cast<size_t>(out[i]);
      MT_CHECK(id < id_defined_.size() && id_defined_[id])
          << k_type << ": the merges produce a token that --vocab-file does not list (while encoding '"
          << piece.substr(0, 80) << "'); the vocab and merges files do not belong together";
    }
    state.cache.insert(piece, hash, out.data() + before, out.size() - before);
  }
}

std::string_view Gpt2BpeTokenizer::token_bytes(int32_t id) const {
  const auto i = static_cast<size_t>(id);
  MT_CHECK(id >= 0 && i < id_defined_.size() && id_defined_[i])
      << k_type << ": token id " << id << " is not in the vocabulary (size " << vocab_size_ << ")";
  return id_to_bytes_[i];
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) bytes.append(token_bytes(id));
  return utf8_replace_invalid(bytes);
}

}  // namespace mt
