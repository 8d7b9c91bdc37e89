// Owns Megatron's indexed dataset files (megatron/core/datasets/indexed_dataset.py, MMIDIDX v1):
// the streaming writer (IndexedDatasetBuilder: add_item / end_document / add_document /
// add_index, then finalize) and the memory-mapped reader (IndexedDataset, a LowLevelDataset for
// GptDataset). Layout, little-endian, no padding (docs/formats.md):
//   .idx: "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code | u64 N sequences | u64 D entries of the
//         document index | i32 lengths[N] | i64 byte pointers[N] | i64 document index[D]
//         (| i8 modes[N] for multimodal files, which the reader accepts and ignores)
//   .bin: the tokens of every sequence, back to back, in the dtype of the code.
// The reader checks every field against both file sizes, so a truncated, mutated or mismatched
// pair is one mt::Error naming the file, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_dataset.h"
#include "data/mapped_file.h"

namespace mt {

// Megatron's DType codes.
enum class TokenDType : uint8_t { uint8 = 1, int8 = 2, int16 = 3, int32 = 4, int64 = 5, float64 = 6, float32 = 7, uint16 = 8 };

// Bytes per item; throws on a code outside 1..8.
int64_t token_dtype_size(TokenDType dtype);
const char* token_dtype_name(TokenDType dtype);
// DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500 entries, else int32.
TokenDType optimal_token_dtype(std::optional<int64_t> vocab_size);

inline std::string idx_path_of(const std::string& prefix) { return prefix + ".idx"; }
inline std::string bin_path_of(const std::string& prefix) { return prefix + ".bin"; }

// Writes one .bin/.idx pair. Tokens stream to PATH.bin.tmp as they arrive; the sequence lengths
// and document boundaries stream to two side files, so memory stays constant however large the
// dataset grows. finalize() writes the .idx under a temporary name and renames both files into
// place (the .bin first: an .idx is only ever seen next to its complete .bin). A builder that is
// destroyed unfinalized removes its temporary files.
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(std::string bin_path, TokenDType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sequence, no document boundary (Megatron's add_item).
  void add_item(std::span<const int32_t> tokens);
  // Closes the current document: appends the sequence count to the document index.
  void end_document();
  // A whole document: `tokens` split into sequences of `lengths` (which sum to tokens.size()),
  // then a boundary. A document with no sequences repeats the previous boundary, as in Megatron.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths);
  // Appends the dataset at `prefix` (Megatron's add_index, used by merge): its sequences, its
  // document boundaries shifted by the sequences already written, and its .bin bytes.
  void add_index(const std::string& prefix);
  // Writes `idx_path` and moves both files into place. The builder is spent afterwards.
  void finalize(const std::string& idx_path) {
    write_index(idx_path);
    commit();
  }
  // finalize in two halves, so a caller finishing several builders can write every index first
  // and move the files into place only once all of them succeeded: write_index writes the .idx
  // under a temporary name, commit renames the .bin and the .idx.
  void write_index(const std::string& idx_path);
  void commit();

  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_boundaries_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  // Side files the lengths and document boundaries stream to until the index is written.
  std::string lengths_path() const { return bin_path_ + ".lengths.tmp"; }
  std::string documents_path() const { return bin_path_ + ".documents.tmp"; }
  void write_tokens(std::span<const int32_t> tokens);
  void push_length(int64_t length);
  void push_boundary(int64_t index);
  void close_all();

  std::string bin_path_;
  TokenDType dtype_;
  std::FILE* bin_ = nullptr;
  std::FILE* lengths_ = nullptr;     // int32 per sequence
  std::FILE* boundaries_ = nullptr;  // int64 per document-index entry
  int64_t num_sequences_ = 0, num_boundaries_ = 0, num_tokens_ = 0;
  std::vector<uint8_t> scratch_;
  bool finalized_ = false;
  std::string idx_path_;  // set by write_index
};

// A read-only .bin/.idx pair, memory-mapped and validated on open.
class IndexedDataset : public LowLevelDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);

  // Both PREFIX.idx and PREFIX.bin exist.
  static bool exists(const std::string& prefix);

  std::span<const int32_t> sequence_lengths() const override { return lengths_; }
  void read_tokens(int64_t seq, int64_t offset, int64_t length, std::vector<int64_t>& out) const override;

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_tokens() const { return num_tokens_; }
  // Entries of the document index (#documents + 1); entry k is the first sequence of document k.
  int64_t document_index_size() const { return num_boundaries_; }
  int64_t document_index(int64_t k) const;
  int64_t num_documents() const { return num_boundaries_ - 1; }
  // All tokens of sequence i.
  std::vector<int64_t> sequence(int64_t i) const;
  // The raw mapped files (merging streams the .bin bytes).
  const MappedFile& idx_file() const { return *idx_; }
  const MappedFile& bin_file() const { return *bin_; }

 private:
  std::string prefix_;
  std::unique_ptr<MappedFile> idx_, bin_;
  TokenDType dtype_ = TokenDType::int32;
  int64_t itemsize_ = 4;
  int64_t num_boundaries_ = 0;
  int64_t num_tokens_ = 0;
  uint64_t pointers_offset_ = 0, boundaries_offset_ = 0;
  // Copied out of the mapping: the .idx stores them at unaligned offsets.
  std::vector<int32_t> lengths_;
};

// Megatron's tools/merge_datasets.py: the datasets at `prefixes`, in that order, into one pair
// at `output_prefix`. All must share a dtype.
void merge_indexed_datasets(const std::vector<std::string>& prefixes, const std::string& output_prefix);

}  // namespace mt
