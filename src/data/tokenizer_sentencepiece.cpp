// Owns the SentencePiece tokenizers' special-token bookkeeping and their encode/decode on top
// of libsentencepiece (see tokenizer_sentencepiece.h).
#include "data/tokenizer_sentencepiece.h"

#include <sentencepiece_processor.h>

#include "base/error.h"
#include "data/tokenizer_files.h"

namespace mt {
namespace {
const char* type_name(SentencePieceFlavor flavor) {
  switch (flavor) {
    case SentencePieceFlavor::megatron: return "SentencePieceTokenizer";
    case SentencePieceFlavor::gpt: return "GPTSentencePieceTokenizer";
    case SentencePieceFlavor::llama2: return "Llama2Tokenizer";
  }
  return "?";
}
}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file, SentencePieceFlavor flavor,
                                               int64_t vocab_extra_ids)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), flavor_(flavor), model_file_(model_file) {
  check_tokenizer_file(model_file, "--tokenizer-model", type_name(flavor));
  const auto status = sp_->Load(model_file);
  MT_CHECK(status.ok()) << "--tokenizer-model " << model_file << ": not a SentencePiece model ("
                        << status.ToString() << ")";
  MT_CHECK(vocab_extra_ids >= 0) << "--vocab-extra-ids must be >= 0, got " << vocab_extra_ids;
  const int pieces = sp_->GetPieceSize();
  for (int i = 0; i < pieces; ++i) vocab_[sp_->IdToPiece(i)] = i;
  vocab_size_ = static_cast<int64_t>(vocab_.size());
  if (flavor != SentencePieceFlavor::megatron) {
    MT_CHECK(vocab_extra_ids == 0) << "--vocab-extra-ids needs --tokenizer-type SentencePieceTokenizer";
    bos_ = sp_->bos_id(), eos_ = sp_->eos_id(), pad_ = sp_->pad_id();
    MT_CHECK(eos_ >= 0) << "--tokenizer-model " << model_file << ": the model has no eos id, which "
                        << type_name(flavor) << " uses as its end-of-document id";
    MT_CHECK(flavor != SentencePieceFlavor::llama2 || bos_ >= 0)
        << "--tokenizer-model " << model_file << ": Llama2Tokenizer prepends bos, but the model has no bos id";
    eod_ = eos_;
    return;
  }
  // _SentencePieceTokenizer._initalize, in its order.
  const auto piece_or = [&](int id, const char* fallback) {
    return id >= 0 && id < pieces ? sp_->IdToPiece(id) : std::string(fallback);
  };
  add_special("<CLS>");
  cls_ = vocab_.at("<CLS>");
  add_special("<SEP>");
  sep_ = vocab_.at("<SEP>");
  add_special("<EOD>");
  eod_ = vocab_.at("<EOD>");
  add_special("<MASK>");
  mask_ = vocab_.at("<MASK>");
  const std::string pad = piece_or(sp_->pad_id(), "<PAD>");
  add_special(pad);
  pad_ = vocab_.at(pad);
  const std::string bos = piece_or(sp_->bos_id(), "<BOS>");
  add_special(bos);
  bos_ = vocab_.at(bos);
  const std::string eos = piece_or(sp_->eos_id(), "<EOS>");
  add_special(eos);
  eos_ = vocab_.at(eos);
  for (int64_t i = 0; i < vocab_extra_ids; ++i) add_special("<extra_id_" + std::to_string(i) + ">");
  vocab_size_ = static_cast<int64_t>(vocab_.size());
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::piece_count() const { return sp_->GetPieceSize(); }

void SentencePieceTokenizer::add_special(const std::string& token) {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) it = vocab_.emplace(token, static_cast<int64_t>(vocab_.size())).first;
  // A Python dict keeps a re-added key at its first position.
  bool seen = false;
  for (auto& [t, id] : specials_) seen = seen || t == token;
  if (!seen) specials_.emplace_back(token, it->second);
  special_of_id_[it->second] = token;
}

void SentencePieceTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  MT_CHECK(status.ok()) << type_name(flavor_) << " " << model_file_ << ": encode failed (" << status.ToString() << ")";
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode_plain(std::span<const int32_t> ids) const {
  std::string text;
  const std::vector<int> v(ids.begin(), ids.end());
  const auto status = sp_->Decode(v, &text);
  MT_CHECK(status.ok()) << type_name(flavor_) << " " << model_file_ << ": cannot decode (" << status.ToString()
                        << "); ids must be in [0, " << piece_count() << ")";
  return text;
}

void SentencePieceTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  if (flavor_ == SentencePieceFlavor::llama2) out.push_back(static_cast<int32_t>(bos_));
  if (flavor_ != SentencePieceFlavor::megatron) return encode_plain(text, out);
  // Megatron's tokenize: cut at the earliest special-token string (first in insertion order on
  // a tie), encode the text before it, emit its id, continue after it.
  size_t idx = 0;
  while (true) {
    size_t best_at = std::string_view::npos;
    const std::pair<std::string, int64_t>* best = nullptr;
    for (const auto& special : specials_) {
      const size_t at = text.find(special.first, idx);
      if (at != std::string_view::npos && at < best_at) best_at = at, best = &special;
    }
    if (best == nullptr) break;
    encode_plain(text.substr(idx, best_at - idx), out);
    out.push_back(static_cast<int32_t>(best->second));
    idx = best_at + best->first.size();
  }
  encode_plain(text.substr(idx), out);
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  if (flavor_ != SentencePieceFlavor::megatron) return decode_plain(ids);
  // Megatron's detokenize: each special token is written as " <TOKEN> " between decoded runs.
  std::string text;
  size_t last = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto it = special_of_id_.find(ids[i]);
    if (it == special_of_id_.end()) continue;
    text += decode_plain(ids.subspan(last, i - last)) + " ";
    text += it->second + " ";
    last = i + 1;
  }
  return text + decode_plain(ids.subspan(last));
}

}  // namespace mt
