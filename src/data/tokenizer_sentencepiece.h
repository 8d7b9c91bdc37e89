// Owns Megatron's SentencePiece tokenizers (--tokenizer-model), through Debian's libsentencepiece:
//   SentencePieceTokenizer     (_SentencePieceTokenizer): the model's pieces plus Megatron's added
//       specials <CLS> <SEP> <EOD> <MASK>, the pad/bos/eos pieces (<PAD>/<BOS>/<EOS> when the model
//       has none) and --vocab-extra-ids <extra_id_i>, each appended after the pieces unless the
//       model already has it. encode splits the text at special-token strings (earliest first) and
//       encodes the pieces between; decode joins with Megatron's spaces. eod = <EOD>.
//   GPTSentencePieceTokenizer  (_GPTSentencePieceTokenizer): plain encode/decode, eod = eos id,
//       bos/pad from the model.
//   Llama2Tokenizer            (_Llama2Tokenizer): as GPT, but encode prepends bos.
// Ids the model leaves undefined (-1) are nullopt. encode is thread-safe (SentencePiece's const API).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mt {

enum class SentencePieceFlavor { megatron, gpt, llama2 };

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Throws mt::Error naming --tokenizer-model when the file is missing or not a model.
  SentencePieceTokenizer(const std::string& model_file, SentencePieceFlavor flavor, int64_t vocab_extra_ids = 0);
  ~SentencePieceTokenizer() override;

  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod() const override { return eod_; }
  std::optional<int64_t> bos() const override { return defined(bos_); }
  std::optional<int64_t> pad() const override { return defined(pad_); }
  std::optional<int64_t> eos() const { return defined(eos_); }
  // Megatron's added ids (SentencePieceTokenizer only; nullopt for the other flavours).
  std::optional<int64_t> cls() const { return defined(cls_); }
  std::optional<int64_t> sep() const { return defined(sep_); }
  std::optional<int64_t> mask() const { return defined(mask_); }
  int64_t piece_count() const;  // pieces in the model itself

 private:
  static std::optional<int64_t> defined(int64_t id) { return id < 0 ? std::nullopt : std::optional<int64_t>(id); }
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  std::string decode_plain(std::span<const int32_t> ids) const;
  void add_special(const std::string& token);

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  SentencePieceFlavor flavor_;
  std::string model_file_;
  int64_t vocab_size_ = 0, eod_ = -1, bos_ = -1, eos_ = -1, pad_ = -1, cls_ = -1, sep_ = -1, mask_ = -1;
  // Megatron's vocab (pieces + added) and its special tokens, in insertion order.
  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::pair<std::string, int64_t>> specials_;
  std::unordered_map<int64_t, std::string> special_of_id_;
};

}  // namespace mt
