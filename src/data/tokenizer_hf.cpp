// Owns loading tokenizer.json / tokenizer_config.json and the HuggingFaceTokenizer encode and
// decode pipelines (see tokenizer_hf.h). Component semantics follow the Rust tokenizers library.
#include "data/tokenizer_hf.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.h"
#include "data/bpe.h"
#include "data/gpt2_pretokenize.h"
#include "data/split_pretokenize.h"
#include "data/tokenizer_files.h"
#include "data/tokenizer_gpt2.h"
#include "data/unicode.h"
#include "data/unicode_nfc.h"

namespace mt {

using nlohmann::json;

namespace {

constexpr const char* k_type = "HuggingFaceTokenizer";

struct Normalizer {
  enum Kind { prepend, replace, nfc } kind;
  std::string pattern, content;  // prepend: content only
};

struct PreTokenizer {
  enum Kind { split, byte_level, metaspace } kind;
  SplitPattern pattern = SplitPattern::llama3;
  bool add_prefix_space = false, use_regex = false;  // byte_level
  std::string replacement = {};                      // metaspace
  enum Prepend { always, first, never } prepend = always;
  bool split_pieces = false;
};

struct Decoder {
  enum Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } kind;
  std::string pattern = {}, content = {};  // replace; strip: content; metaspace: pattern = replacement
  int start = 0, stop = 0;       // strip
  bool strip_first_space = false;  // metaspace
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool lstrip, rstrip;
};

uint64_t next_instance_id() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos);
  s = std::move(out);
}

// The byte of a "<0xXX>" token, or -1.
int byte_token_value(std::string_view t) {
  const auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>' || hex(t[3]) < 0 || hex(t[4]) < 0) return -1;
  return hex(t[3]) * 16 + hex(t[4]);
}

std::string byte_token_name(unsigned char b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

// Each thread's word cache and scratch, for one tokenizer at a time.
struct ThreadState {
  uint64_t owner = 0;
  BpeCache cache;
  std::vector<int32_t> symbols;
  std::vector<std::string> pieces, next_pieces;
};

}  // namespace

struct HuggingFaceTokenizer::Impl {
  std::string file;  // tokenizer.json, for messages
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  bool byte_level = false;  // the model's symbols are bytes (a ByteLevel pre-tokenizer ran)
  // Token text -> id: raw bytes when byte_level, the tokenizer.json spelling otherwise.
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint32_t, int32_t> char_ids;  // one-character tokens by code point (not byte-level)
  std::vector<std::string> spelling;  // id -> tokenizer.json spelling (vocabulary and added tokens)
  std::vector<bool> defined;
  std::unique_ptr<BpeMerges> merges;
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  std::optional<int32_t> unk;
  std::array<int32_t, 256> byte_ids{};  // byte-level: the token of each byte; byte fallback: <0xXX>
  bool all_byte_tokens = false;
  std::vector<AddedToken> added;  // longest first
  std::array<std::vector<uint32_t>, 256> added_by_first_byte;  // indices into `added`
  std::vector<int32_t> prefix, suffix;  // the post-processor's special tokens
  std::vector<Decoder> decoders;
  bool has_decoder = false, clean_up_spaces = false;
  std::optional<int32_t> eos, bos, pad;
  std::string chat_template;
  int64_t vocab_size = 0;
  uint64_t instance_id = next_instance_id();

  [[noreturn]] void refuse(const std::string& what) const {
    MT_FAIL() << "--tokenizer-model " << file << ": " << what << " is not implemented in megatron.cpp's " << k_type;
  }
  int32_t id_of(const std::string& spelled, const std::string& where) const;

  void load_normalizer(const json& j);
  void load_pre_tokenizer(const json& j);
  void load_model(const json& j);
  void load_added_tokens(const json& j);
  void load_post_processor(const json& j);
  void load_decoder(const json& j);
  void load_config(const json& config);

  void encode(std::string_view text, bool with_specials, std::vector<int32_t>& out) const;
  void encode_section(std::string_view text, bool first_section, ThreadState& state, std::vector<int32_t>& out) const;
  void encode_piece(const std::string& piece, ThreadState& state, std::vector<int32_t>& out) const;
  std::string decode(std::span<const int32_t> ids) const;
};

namespace {

std::string kind_of(const json& j) { return j.is_object() && j.contains("type") ? j["type"].get<std::string>() : "?"; }

// A json string field, or `fallback` when absent or null.
std::string text_or(const json& j, const char* key, const std::string& fallback = "") {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : fallback;
}
bool flag_or(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

}  // namespace

int32_t HuggingFaceTokenizer::Impl::id_of(const std::string& spelled, const std::string& where) const {
  for (const AddedToken& a : added)
    if (a.content == spelled) return a.id;
  for (size_t id = 0; id < spelling.size(); ++id)
    if (defined[id] && spelling[id] == spelled) return static_cast<int32_t>(id);
  MT_FAIL() << "--tokenizer-model " << file << ": " << where << " names the token '" << spelled
            << "', which is not in the vocabulary";
}

void HuggingFaceTokenizer::Impl::load_normalizer(const json& j) {
  if (j.is_null()) return;
  const std::string type = kind_of(j);
  if (type == "Sequence") {
    for (const json& n : j.at("normalizers")) load_normalizer(n);
  } else if (type == "Prepend") {
    normalizers.push_back({Normalizer::prepend, "", j.at("prepend").get<std::string>()});
  } else if (type == "Replace") {
    if (!j.at("pattern").contains("String")) refuse("a Replace normalizer with a regex pattern");
    normalizers.push_back({Normalizer::replace, j["pattern"]["String"].get<std::string>(), j.at("content").get<std::string>()});
  } else if (type == "NFC") {
    normalizers.push_back({Normalizer::nfc, "", ""});
  } else {
    refuse("the normalizer " + type);
  }
}

void HuggingFaceTokenizer::Impl::load_pre_tokenizer(const json& j) {
  if (j.is_null()) return;
  const std::string type = kind_of(j);
  if (type != "Sequence" && byte_level) refuse("a pre-tokenizer (" + type + ") after ByteLevel");
  if (type == "Sequence") {
    for (const json& p : j.at("pretokenizers")) load_pre_tokenizer(p);
  } else if (type == "Split") {
    const json& pattern = j.at("pattern");
    const std::string regex = pattern.contains("Regex") ? pattern["Regex"].get<std::string>() : "";
    const auto known = known_split_pattern(regex);
    if (!known) refuse("the Split pre-tokenizer pattern " + pattern.dump());
    if (text_or(j, "behavior") != "Isolated" || flag_or(j, "invert", false))
      refuse("a Split pre-tokenizer with behavior " + text_or(j, "behavior", "?") + (flag_or(j, "invert", false) ? " inverted" : ""));
    PreTokenizer p{PreTokenizer::split};
    p.pattern = *known;
    pre_tokenizers.push_back(p);
  } else if (type == "ByteLevel") {
    PreTokenizer p{PreTokenizer::byte_level};
    p.add_prefix_space = flag_or(j, "add_prefix_space", true);
    p.use_regex = flag_or(j, "use_regex", true);
    pre_tokenizers.push_back(p);
    byte_level = true;
  } else if (type == "Metaspace") {
    PreTokenizer p{PreTokenizer::metaspace};
    p.replacement = text_or(j, "replacement", "\u2581");
    const std::string scheme = text_or(j, "prepend_scheme", flag_or(j, "add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") p.prepend = PreTokenizer::always;
    else if (scheme == "first") p.prepend = PreTokenizer::first;
    else if (scheme == "never") p.prepend = PreTokenizer::never;
    else refuse("the Metaspace prepend_scheme " + scheme);
    p.split_pieces = flag_or(j, "split", true);
    pre_tokenizers.push_back(p);
  } else {
    refuse("the pre-tokenizer " + type);
  }
}

void HuggingFaceTokenizer::Impl::load_model(const json& m) {
  const std::string type = kind_of(m);
  if (type != "BPE") refuse("the model type " + type + " (BPE is)");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0) refuse("BPE dropout");
  if (!text_or(m, "continuing_subword_prefix").empty() || !text_or(m, "end_of_word_suffix").empty())
    refuse("a BPE continuing_subword_prefix or end_of_word_suffix");
  ignore_merges = flag_or(m, "ignore_merges", false);
  byte_fallback = flag_or(m, "byte_fallback", false);
  fuse_unk = flag_or(m, "fuse_unk", false);

  // The vocabulary, keyed by what the pieces hold: raw bytes for byte-level models.
  std::string key;
  for (const auto& [spelled, value] : m.at("vocab").items()) {
    const int64_t id = value.get<int64_t>();
    MT_CHECK(id >= 0 && id < (int64_t{1} << 30)) << "--tokenizer-model " << file << ": token " << spelled << " has id " << id;
    if (byte_level) {
      MT_CHECK(gpt2_unicode_to_bytes(spelled, key)) << "--tokenizer-model " << file << ": token " << spelled
                                                  << " is not spelled in the ByteLevel alphabet";
    } else {
      key = spelled;
    }
    vocab[key] = static_cast<int32_t>(id);
    if (const Utf8Step step = utf8_next(key, 0); !byte_level && !key.empty() && step.valid && step.length == key.size())
      char_ids[step.code_point] = static_cast<int32_t>(id);
    if (spelling.size() <= static_cast<size_t>(id)) spelling.resize(static_cast<size_t>(id) + 1), defined.resize(static_cast<size_t>(id) + 1);
    spelling[static_cast<size_t>(id)] = spelled;
    defined[static_cast<size_t>(id)] = true;
  }
  if (const std::string u = text_or(m, "unk_token"); !u.empty()) {
    const auto it = vocab.find(u);
    MT_CHECK(it != vocab.end()) << "--tokenizer-model " << file << ": unk_token " << u << " is not in the vocabulary";
    unk = it->second;
  }
  all_byte_tokens = true;
  for (int b = 0; b < 256; ++b) {
    const std::string name = byte_level ? std::string(1, static_cast<char>(b)) : byte_token_name(static_cast<unsigned char>(b));
    const auto it = vocab.find(name);
    byte_ids[static_cast<size_t>(b)] = it == vocab.end() ? -1 : it->second;
    all_byte_tokens = all_byte_tokens && it != vocab.end();
  }
  MT_CHECK(!byte_level || all_byte_tokens) << "--tokenizer-model " << file
                                           << ": a ByteLevel vocabulary must have a token for each of the 256 bytes";

  // Merges: "left right" strings (or [left, right] pairs in newer files), ranked by position.
  std::vector<BpeMerges::Merge> list;
  const json& merges_json = m.at("merges");
  list.reserve(merges_json.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges_json.size(); ++rank) {
    const json& entry = merges_json[rank];
    if (entry.is_array() && entry.size() == 2) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      const std::string line = entry.get<std::string>();
      const size_t space = line.find(' ');
      MT_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos)
          << "--tokenizer-model " << file << ": merge " << rank << " '" << line << "' is not two tokens";
      left = line.substr(0, space);
      right = line.substr(space + 1);
    }
    if (byte_level) {
      std::string lb, rb;
      MT_CHECK(gpt2_unicode_to_bytes(left, lb) && gpt2_unicode_to_bytes(right, rb))
          << "--tokenizer-model " << file << ": merge " << rank << " is not spelled in the ByteLevel alphabet";
      left = std::move(lb), right = std::move(rb);
    }
    const auto l = vocab.find(left), r = vocab.find(right), merged = vocab.find(left + right);
    MT_CHECK(l != vocab.end() && r != vocab.end() && merged != vocab.end())
        << "--tokenizer-model " << file << ": merge " << rank << " uses or makes a token that is not in the vocabulary";
    list.push_back({l->second, r->second, merged->second, static_cast<uint32_t>(rank)});
  }
  merges = std::make_unique<BpeMerges>(byte_ids, list);
}

void HuggingFaceTokenizer::Impl::load_added_tokens(const json& tokens) {
  for (const json& t : tokens) {
    const auto id = static_cast<int32_t>(t.at("id").get<int64_t>());
    const std::string content = t.at("content").get<std::string>();
    MT_CHECK(id >= 0 && !content.empty()) << "--tokenizer-model " << file << ": added token '" << content << "' id " << id;
    if (flag_or(t, "single_word", false)) refuse("the single_word added token '" + content + "'");
    if (flag_or(t, "normalized", false) && !normalizers.empty())
      refuse("the normalized added token '" + content + "' (with a normalizer)");
    added.push_back({id, content, flag_or(t, "lstrip", false), flag_or(t, "rstrip", false)});
    if (spelling.size() <= static_cast<size_t>(id)) spelling.resize(static_cast<size_t>(id) + 1), defined.resize(static_cast<size_t>(id) + 1);
    spelling[static_cast<size_t>(id)] = content;
    defined[static_cast<size_t>(id)] = true;
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (uint32_t i = 0; i < added.size(); ++i)
    added_by_first_byte[static_cast<unsigned char>(added[i].content[0])].push_back(i);
}

void HuggingFaceTokenizer::Impl::load_post_processor(const json& j) {
  if (j.is_null()) return;
  const std::string type = kind_of(j);
  if (type == "Sequence") {
    for (const json& p : j.at("processors")) load_post_processor(p);
  } else if (type == "ByteLevel") {
    // Adjusts offsets only.
  } else if (type == "TemplateProcessing") {
    prefix.clear(), suffix.clear();
    bool seen_a = false;
    for (const json& piece : j.at("single")) {
      if (piece.contains("Sequence")) {
        MT_CHECK(piece["Sequence"].at("id").get<std::string>() == "A")
            << "--tokenizer-model " << file << ": the single template uses sequence " << piece.dump();
        seen_a = true;
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      const json& special = j.at("special_tokens").at(name);
      for (const json& id : special.at("ids")) (seen_a ? suffix : prefix).push_back(id.get<int32_t>());
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    prefix = {j.at("cls").at(1).get<int32_t>()};
    suffix = {j.at("sep").at(1).get<int32_t>()};
  } else {
    refuse("the post-processor " + type);
  }
}

void HuggingFaceTokenizer::Impl::load_decoder(const json& j) {
  if (j.is_null()) return;
  has_decoder = true;
  const std::string type = kind_of(j);
  if (type == "Sequence") {
    for (const json& d : j.at("decoders")) load_decoder(d);
  } else if (type == "ByteLevel") {
    decoders.push_back({Decoder::byte_level});
  } else if (type == "Replace") {
    if (!j.at("pattern").contains("String")) refuse("a Replace decoder with a regex pattern");
    decoders.push_back({Decoder::replace, j["pattern"]["String"].get<std::string>(), j.at("content").get<std::string>()});
  } else if (type == "ByteFallback") {
    decoders.push_back({Decoder::byte_fallback});
  } else if (type == "Fuse") {
    decoders.push_back({Decoder::fuse});
  } else if (type == "Strip") {
    Decoder d{Decoder::strip, "", j.at("content").get<std::string>()};
    d.start = j.at("start").get<int>();
    d.stop = j.at("stop").get<int>();
    decoders.push_back(d);
  } else if (type == "Metaspace") {
    Decoder d{Decoder::metaspace, text_or(j, "replacement", "\u2581")};
    d.strip_first_space = text_or(j, "prepend_scheme", flag_or(j, "add_prefix_space", true) ? "always" : "never") != "never";
    decoders.push_back(d);
  } else {
    refuse("the decoder " + type);
  }
}

void HuggingFaceTokenizer::Impl::load_config(const json& config) {
  // Special tokens are strings or AddedToken objects {"content": ...}.
  const auto special = [&](const char* key) -> std::optional<int32_t> {
    if (!config.contains(key) || config[key].is_null()) return std::nullopt;
    const json& v = config[key];
    const std::string name = v.is_object() ? v.at("content").get<std::string>() : v.get<std::string>();
    return id_of(name, std::string("tokenizer_config.json's ") + key);
  };
  eos = special("eos_token");
  bos = special("bos_token");
  pad = special("pad_token");
  clean_up_spaces = flag_or(config, "clean_up_tokenization_spaces", false);
  if (config.contains("chat_template") && config["chat_template"].is_string())
    chat_template = config["chat_template"].get<std::string>();
  // transformers' Llama and Gemma fast tokenizers rebuild the post-processor from add_bos_token /
  // add_eos_token (defaults true / false), whatever tokenizer.json says.
  const std::string cls = text_or(config, "tokenizer_class");
  for (const char* llama_like : {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"}) {
    if (cls != llama_like && cls != std::string(llama_like) + "Fast") continue;
    prefix.clear(), suffix.clear();
    if (flag_or(config, "add_bos_token", true) && bos) prefix.push_back(*bos);
    if (flag_or(config, "add_eos_token", false) && eos) suffix.push_back(*eos);
  }
}

HuggingFaceTokenizer::HuggingFaceTokenizer(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  MT_CHECK(!path.empty()) << "--tokenizer-type " << k_type << " needs --tokenizer-model (a directory with tokenizer.json)";
  std::error_code ec;
  const bool is_dir = std::filesystem::is_directory(path, ec);
  m.file = is_dir ? (std::filesystem::path(path) / "tokenizer.json").string() : path;
  const std::string config_file = (std::filesystem::path(m.file).parent_path() / "tokenizer_config.json").string();
  const auto parse = [&](const std::string& file) {
    const std::string text = read_tokenizer_file(file, "--tokenizer-model", k_type);
    try {
      return json::parse(text);
    } catch (const json::exception& e) {
      MT_FAIL() << "--tokenizer-model " << file << ": not valid JSON (" << e.what() << ")";
    }
  };
  const json tokenizer = parse(m.file);
  MT_CHECK(std::filesystem::exists(config_file, ec))
      << "--tokenizer-model " << path << ": no tokenizer_config.json beside tokenizer.json; " << k_type
      << " reads its eos_token (the end-of-document id) there";
  const json config = parse(config_file);
  try {
    MT_CHECK(tokenizer.is_object() && tokenizer.contains("model")) << "--tokenizer-model " << m.file << ": no \"model\"";
    if (tokenizer.contains("truncation") && !tokenizer["truncation"].is_null()) m.refuse("truncation");
    if (tokenizer.contains("padding") && !tokenizer["padding"].is_null()) m.refuse("padding");
    m.load_normalizer(tokenizer.value("normalizer", json()));
    m.load_pre_tokenizer(tokenizer.value("pre_tokenizer", json()));
    m.load_model(tokenizer.at("model"));
    m.load_added_tokens(tokenizer.value("added_tokens", json::array()));
    m.load_post_processor(tokenizer.value("post_processor", json()));
    m.load_decoder(tokenizer.value("decoder", json()));
    m.load_config(config);
  } catch (const json::exception& e) {
    MT_FAIL() << "--tokenizer-model " << m.file << ": malformed (" << e.what() << ")";
  }
  MT_CHECK(m.eos.has_value()) << "--tokenizer-model " << config_file << ": no eos_token, which " << k_type
                              << " uses as the end-of-document id";
  m.vocab_size = std::count(m.defined.begin(), m.defined.end(), true);
}

HuggingFaceTokenizer::~HuggingFaceTokenizer() = default;

void HuggingFaceTokenizer::Impl::encode(std::string_view text, bool with_specials, std::vector<int32_t>& out) const {
  thread_local ThreadState state;
  if (state.owner != instance_id) {
    state.cache.clear();
    state.owner = instance_id;
  }
  if (with_specials) out.insert(out.end(), prefix.begin(), prefix.end());
  // Added tokens first: at each position the longest one that starts there, the earliest position
  // first. lstrip / rstrip take the white space beside the token into it.
  size_t section_start = 0;
  bool first_section = true;
  const auto space_at = [&](size_t pos) { return class_at(text, pos).cls == CharClass::space; };
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* hit = nullptr;
    for (const uint32_t i : added_by_first_byte[static_cast<unsigned char>(text[pos])])
      if (text.compare(pos, added[i].content.size(), added[i].content) == 0) {
        hit = &added[i];
        break;
      }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t section_end = pos, after = pos + hit->content.size();
    if (hit->lstrip) {  // the section's trailing white space
      size_t last_non_space = section_start;
      for (size_t p = section_start; p < pos; p += class_at(text, p).length)
        if (!space_at(p)) last_non_space = p + class_at(text, p).length;
      section_end = last_non_space;
    }
    if (hit->rstrip)
      while (after < text.size() && space_at(after)) after += class_at(text, after).length;
    if (section_end > section_start) encode_section(text.substr(section_start, section_end - section_start), first_section, state, out);
    out.push_back(hit->id);
    first_section = false;
    section_start = pos = after;
  }
  if (section_start < text.size()) encode_section(text.substr(section_start), first_section, state, out);
  if (with_specials) out.insert(out.end(), suffix.begin(), suffix.end());
}

void HuggingFaceTokenizer::Impl::encode_section(std::string_view text, bool first_section, ThreadState& state,
                                                std::vector<int32_t>& out) const {
  std::string normalized(text);
  for (const Normalizer& n : normalizers) {
    if (n.kind == Normalizer::prepend) {
      if (!normalized.empty()) normalized.insert(0, n.content);
    } else if (n.kind == Normalizer::nfc) {
      normalized = nfc(normalized);
    } else {
      replace_all(normalized, n.pattern, n.content);
    }
  }
  auto& pieces = state.pieces;
  auto& next = state.next_pieces;
  pieces.assign(1, std::move(normalized));
  for (const PreTokenizer& p : pre_tokenizers) {
    next.clear();
    for (std::string& piece : pieces) {
      std::string_view part;
      switch (p.kind) {
        case PreTokenizer::split: {
          SplitPreTokenizer splitter(piece, p.pattern);
          while (splitter.next(part)) next.emplace_back(part);
          break;
        }
        case PreTokenizer::byte_level: {
          if (p.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
          if (!p.use_regex) {
            next.push_back(std::move(piece));
            break;
          }
          Gpt2PreTokenizer splitter(piece);
          while (splitter.next(part)) next.emplace_back(part);
          break;
        }
        case PreTokenizer::metaspace: {
          replace_all(piece, " ", p.replacement);
          const bool prepend = p.prepend == PreTokenizer::always || (p.prepend == PreTokenizer::first && first_section);
          if (prepend && piece.compare(0, p.replacement.size(), p.replacement) != 0) piece.insert(0, p.replacement);
          if (!p.split_pieces) {
            next.push_back(std::move(piece));
            break;
          }
          size_t begin = 0;  // each replacement starts a piece
          for (size_t hit = piece.find(p.replacement, 1); hit != std::string::npos; hit = piece.find(p.replacement, hit + 1)) {
            next.push_back(piece.substr(begin, hit - begin));
            begin = hit;
          }
          next.push_back(piece.substr(begin));
          break;
        }
      }
    }
    std::swap(pieces, next);
  }
  for (const std::string& piece : pieces)
    if (!piece.empty()) encode_piece(piece, state, out);
}

void HuggingFaceTokenizer::Impl::encode_piece(const std::string& piece, ThreadState& state, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (const auto it = vocab.find(piece); it != vocab.end()) return out.push_back(it->second);
  }
  const size_t hash = std::hash<std::string_view>()(piece);
  if (state.cache.lookup(piece, hash, out)) return;
  auto& sym = state.symbols;
  sym.clear();
  if (byte_level) {
    for (const char c : piece) sym.push_back(byte_ids[static_cast<unsigned char>(c)]);
  } else {
    // Characters are the initial symbols; one the vocabulary lacks becomes its UTF-8 bytes' <0xXX>
    // tokens (byte_fallback) or the unknown token (consecutive ones fused with fuse_unk).
    bool previous_unknown = false;
    for (size_t pos = 0; pos < piece.size();) {
      const Utf8Step step = utf8_next(piece, pos);
      const auto it = step.valid ? char_ids.find(step.code_point) : char_ids.end();
      if (it != char_ids.end()) {
        sym.push_back(it->second);
        previous_unknown = false;
      } else if (byte_fallback && all_byte_tokens) {
        for (uint32_t k = 0; k < step.length; ++k) sym.push_back(byte_ids[static_cast<unsigned char>(piece[pos + k])]);
        previous_unknown = false;
      } else {
        MT_CHECK(unk.has_value()) << k_type << ": '" << piece.substr(pos, step.length) << "' is not in the vocabulary of "
                                  << file << ", which has no unk_token";
        if (!(fuse_unk && previous_unknown)) sym.push_back(*unk);
        previous_unknown = true;
      }
      pos += step.length;
    }
  }
  merges->merge(sym);
  out.insert(out.end(), sym.begin(), sym.end());
  state.cache.insert(piece, hash, sym.data(), sym.size());
}

void HuggingFaceTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode(text, true, out);
}

void HuggingFaceTokenizer::encode_without_specials(std::string_view text, std::vector<int32_t>& out) const {
  impl_->encode(text, false, out);
}

std::string HuggingFaceTokenizer::Impl::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    MT_CHECK(id >= 0 && static_cast<size_t>(id) < defined.size() && defined[static_cast<size_t>(id)])
        << k_type << ": token id " << id << " is not in the vocabulary of " << file;
    tokens.push_back(spelling[static_cast<size_t>(id)]);
  }
  std::string bytes;
  for (const Decoder& d : decoders) {
    switch (d.kind) {
      case Decoder::byte_level: {  // every token's bytes, one string; a token outside the alphabet as it is
        std::string all, raw;
        for (const std::string& t : tokens) all += gpt2_unicode_to_bytes(t, raw) ? raw : t;
        tokens.assign(1, utf8_replace_invalid(all));
        break;
      }
      case Decoder::replace:
        for (std::string& t : tokens) replace_all(t, d.pattern, d.content);
        break;
      case Decoder::byte_fallback: {  // runs of <0xXX> become their text, or one U+FFFD per byte
        std::vector<std::string> fused;
        const auto flush = [&] {
          if (bytes.empty()) return;
          if (utf8_replace_invalid(bytes) == bytes) {
            fused.push_back(bytes);
          } else {
            for (size_t k = 0; k < bytes.size(); ++k) fused.push_back("\xEF\xBF\xBD");
          }
          bytes.clear();
        };
        for (std::string& t : tokens) {
          if (const int value = byte_token_value(t); value >= 0) {
            bytes.push_back(static_cast<char>(value));
            continue;
          }
          flush();
          fused.push_back(std::move(t));
        }
        flush();
        tokens = std::move(fused);
        break;
      }
      case Decoder::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Decoder::strip:
        for (std::string& t : tokens) {
          size_t begin = 0, end = t.size();
          for (int k = 0; k < d.start && t.compare(begin, d.content.size(), d.content) == 0; ++k) begin += d.content.size();
          for (int k = 0; k < d.stop && end >= begin + d.content.size() &&
                          t.compare(end - d.content.size(), d.content.size(), d.content) == 0; ++k)
            end -= d.content.size();
          t = t.substr(begin, end - begin);
        }
        break;
      case Decoder::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], d.pattern, " ");
          if (i == 0 && d.strip_first_space && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !has_decoder) text += ' ';
    text += tokens[i];
  }
  if (clean_up_spaces) {
    for (const auto& [from, to] : std::initializer_list<std::pair<const char*, const char*>>{
             {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
             {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}})
      replace_all(text, from, to);
  }
  return utf8_replace_invalid(text);
}

std::string HuggingFaceTokenizer::decode(std::span<const int32_t> ids) const { return impl_->decode(ids); }
int64_t HuggingFaceTokenizer::vocab_size() const { return impl_->vocab_size; }
int64_t HuggingFaceTokenizer::eod() const { return *impl_->eos; }
std::optional<int64_t> HuggingFaceTokenizer::bos() const { return impl_->bos; }
std::optional<int64_t> HuggingFaceTokenizer::pad() const { return impl_->pad; }
std::string HuggingFaceTokenizer::chat_template() const { return impl_->chat_template; }

const std::string& HuggingFaceTokenizer::token(int32_t id) const {
  MT_CHECK(id >= 0 && static_cast<size_t>(id) < impl_->defined.size() && impl_->defined[static_cast<size_t>(id)])
      << k_type << ": token id " << id << " is not in the vocabulary of " << impl_->file;
  return impl_->spelling[static_cast<size_t>(id)];
}

}  // namespace mt
