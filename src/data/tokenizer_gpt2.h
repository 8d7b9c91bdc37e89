// Owns Megatron's GPT2BPETokenizer (--vocab-file vocab.json/encoder.json, --merge-file
// merges.txt/vocab.bpe): OpenAI's byte-level BPE as megatron/training/tokenizer/gpt2_tokenization.py
// runs it. encode = GPT-2 pre-tokenisation (gpt2_pretokenize.h), bytes -> byte symbols, merges
// (bpe.h); decode = token bytes joined, ill-formed UTF-8 replaced by U+FFFD (errors='replace').
// vocab_size = number of vocab entries, eod = id of "<|endoftext|>", no bos or pad.
// "<|endoftext|>" inside text is not special (it encodes as ordinary text, as in Megatron).
// Thread-safe: encode may run on many threads at once; each thread keeps its own word cache.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "data/bpe.h"
#include "data/tokenizer.h"

namespace mt {

class Gpt2BpeTokenizer : public Tokenizer {
 public:
  // Throws mt::Error naming the flag and file when a file is missing, unreadable or malformed.
  Gpt2BpeTokenizer(const std::string& vocab_file, const std::string& merge_file);

  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t eod() const override { return eod_; }

  // The raw bytes of a token (not the byte-to-unicode spelling of vocab.json).
  std::string_view token_bytes(int32_t id) const;
  const BpeMerges& merges() const { return *merges_; }

 private:
  int64_t vocab_size_ = 0, eod_ = -1;
  std::vector<std::string> id_to_bytes_;  // indexed by id; empty for ids the vocab skips
  std::vector<bool> id_defined_;
  std::unique_ptr<BpeMerges> merges_;
  uint64_t instance_id_;  // tells thread-local caches which tokenizer they belong to
};

// GPT-2's bytes_to_unicode(): the printable character standing for each byte in vocab files.
const std::array<uint32_t, 256>& gpt2_byte_to_unicode();
// Its inverse on a whole spelling (vocab.json, merges, tokenizer.json's ByteLevel vocabularies):
// the raw bytes, or false when a character stands for no byte.
bool gpt2_unicode_to_bytes(std::string_view spelled, std::string& bytes);

}  // namespace mt
