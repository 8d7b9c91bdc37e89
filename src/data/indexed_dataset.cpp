// Owns the MMIDIDX v1 writer and reader (see indexed_dataset.h).
#include "data/indexed_dataset.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace mt {

namespace {

constexpr char k_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t k_version = 1;
constexpr uint64_t k_header_bytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, N, D
constexpr size_t k_io_buffer = 1 << 20;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::FILE* open_for_write(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  MT_CHECK(f != nullptr) << "cannot create " << path << ": " << std::strerror(errno);
  std::setvbuf(f, nullptr, _IOFBF, k_io_buffer);
  return f;
}

void write_bytes(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n == 0) return;
  MT_CHECK(std::fwrite(data, 1, n, f) == n) << "cannot write " << path << ": " << std::strerror(errno)
                                            << " (disk full?)";
}

void close_file(std::FILE*& f, const std::string& path) {
  if (!f) return;
  const int rc = std::fclose(f);
  f = nullptr;
  MT_CHECK(rc == 0) << "cannot write " << path << ": " << std::strerror(errno) << " (disk full?)";
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

int64_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8:
    case TokenDType::int8: return 1;
    case TokenDType::int16:
    case TokenDType::uint16: return 2;
    case TokenDType::int32:
    case TokenDType::float32: return 4;
    case TokenDType::int64:
    case TokenDType::float64: return 8;
  }
  MT_FAIL() << "unknown token dtype code " << static_cast<int>(dtype) << " (Megatron's codes are 1..8)";
}

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::uint8: return "uint8";
    case TokenDType::int8: return "int8";
    case TokenDType::int16: return "int16";
    case TokenDType::int32: return "int32";
    case TokenDType::int64: return "int64";
    case TokenDType::float64: return "float64";
    case TokenDType::float32: return "float32";
    case TokenDType::uint16: return "uint16";
  }
  return "?";
}

TokenDType optimal_token_dtype(std::optional<int64_t> vocab_size) {
  return vocab_size && *vocab_size < 65500 ? TokenDType::uint16 : TokenDType::int32;
}

// --- Writer -----------------------------------------------------------------------------------

IndexedDatasetBuilder::IndexedDatasetBuilder(std::string bin_path, TokenDType dtype)
    : bin_path_(std::move(bin_path)), dtype_(dtype) {
  MT_CHECK(dtype_ != TokenDType::float32 && dtype_ != TokenDType::float64)
      << "token files hold integer ids; " << token_dtype_name(dtype_) << " is not a token dtype";
  (void)token_dtype_size(dtype_);  // rejects unknown codes
  bin_ = open_for_write(temp_path(bin_path_));
  lengths_ = open_for_write(lengths_path());
  boundaries_ = open_for_write(documents_path());
  push_boundary(0);
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (finalized_) return;
  for (std::FILE* f : {bin_, lengths_, boundaries_})
    if (f) std::fclose(f);
  for (const std::string& p : {temp_path(bin_path_), lengths_path(), documents_path()})
    std::remove(p.c_str());
  if (!idx_path_.empty()) std::remove(temp_path(idx_path_).c_str());
}

void IndexedDatasetBuilder::write_tokens(std::span<const int32_t> tokens) {
  const int64_t size = token_dtype_size(dtype_);
  scratch_.resize(tokens.size() * static_cast<size_t>(size));
  uint8_t* out = scratch_.data();
  auto check_range = [&](int32_t t, int64_t lo, int64_t hi) {
    MT_CHECK(t >= lo && t <= hi) << "token id " << t << " does not fit the " << token_dtype_name(dtype_)
                                 << " items of " << bin_path_ << " (the tokenizer's vocabulary decides the dtype)";
  };
  switch (dtype_) {
    case TokenDType::uint16:
      for (size_t i = 0; i < tokens.size(); ++i) {
        check_range(tokens[i], 0, 65535);
        const uint16_t v = static_cast<uint16_t>(tokens[i]);
        std::memcpy(out + 2 * i, &v, 2);
      }
      break;
    case TokenDType::int32: std::memcpy(out, tokens.data(), tokens.size() * 4); break;
    case TokenDType::int64:
      for (size_t i = 0; i < tokens.size(); ++i) {
        const int64_t v = tokens[i];
        std::memcpy(out + 8 * i, &v, 8);
      }
      break;
    case TokenDType::int16:
      for (size_t i = 0; i < tokens.size(); ++i) {
        check_range(tokens[i], -32768, 32767);
        const int16_t v = static_cast<int16_t>(tokens[i]);
        std::memcpy(out + 2 * i, &v, 2);
      }
      break;
    case TokenDType::uint8:
    case TokenDType::int8:
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (dtype_ == TokenDType::uint8) check_range(tokens[i], 0, 255);
        else check_range(tokens[i], -128, 127);
        out[i] = static_cast<uint8_t>(tokens[i]);
      }
      break;
    case TokenDType::float32:
    case TokenDType::float64: MT_FAIL() << "internal: float token dtype";
  }
  write_bytes(bin_, scratch_.data(), scratch_.size(), bin_path_);
  num_tokens_ += static_cast<int64_t>(tokens.size());
}

void IndexedDatasetBuilder::push_length(int64_t length) {
  MT_CHECK(length >= 0 && length <= std::numeric_limits<int32_t>::max())
      << "a sequence of " << length << " tokens does not fit the .idx format's int32 lengths";
  const int32_t v = static_cast<int32_t>(length);
  write_bytes(lengths_, &v, 4, bin_path_);
  ++num_sequences_;
}

void IndexedDatasetBuilder::push_boundary(int64_t index) {
  write_bytes(boundaries_, &index, 8, bin_path_);
  ++num_boundaries_;
}

void IndexedDatasetBuilder::add_item(std::span<const int32_t> tokens) {
  MT_CHECK(!finalized_) << "IndexedDatasetBuilder used after finalize";
  write_tokens(tokens);
  push_length(static_cast<int64_t>(tokens.size()));
}

void IndexedDatasetBuilder::end_document() {
  MT_CHECK(!finalized_) << "IndexedDatasetBuilder used after finalize";
  push_boundary(num_sequences_);
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens, std::span<const int32_t> lengths) {
  MT_CHECK(!finalized_) << "IndexedDatasetBuilder used after finalize";
  int64_t total = 0;
  for (int32_t l : lengths) {
    MT_CHECK(l >= 0) << "negative sequence length " << l;
    total += l;
  }
  MT_CHECK(total == static_cast<int64_t>(tokens.size()))
      << "add_document: the sequence lengths sum to " << total << " but the document has " << tokens.size()
      << " tokens";
  write_tokens(tokens);
  for (int32_t l : lengths) push_length(l);
  push_boundary(num_sequences_);
}

void IndexedDatasetBuilder::add_index(const std::string& prefix) {
  MT_CHECK(!finalized_) << "IndexedDatasetBuilder used after finalize";
  const IndexedDataset other(prefix);
  MT_CHECK(other.dtype() == dtype_) << "cannot merge " << prefix << ": its tokens are "
                                    << token_dtype_name(other.dtype()) << ", the output's are "
                                    << token_dtype_name(dtype_) << " (datasets of one tokenizer share a dtype)";
  const int64_t offset = num_sequences_;
  for (int32_t l : other.sequence_lengths()) push_length(l);
  for (int64_t k = 1; k < other.document_index_size(); ++k) push_boundary(offset + other.document_index(k));
  write_bytes(bin_, other.bin_file().data(), other.bin_file().size(), bin_path_);
  num_tokens_ += other.num_tokens();
}

void IndexedDatasetBuilder::close_all() {
  close_file(bin_, bin_path_);
  close_file(lengths_, lengths_path());
  close_file(boundaries_, documents_path());
}

void IndexedDatasetBuilder::write_index(const std::string& idx_path) {
  MT_CHECK(!finalized_ && idx_path_.empty()) << "IndexedDatasetBuilder finalized twice";
  close_all();
  const std::string idx_tmp = temp_path(idx_path);
  std::FILE* idx = open_for_write(idx_tmp);
  try {
    const uint64_t n = static_cast<uint64_t>(num_sequences_), d = static_cast<uint64_t>(num_boundaries_);
    const uint8_t code = static_cast<uint8_t>(dtype_);
    write_bytes(idx, k_magic, 9, idx_tmp);
    write_bytes(idx, &k_version, 8, idx_tmp);
    write_bytes(idx, &code, 1, idx_tmp);
    write_bytes(idx, &n, 8, idx_tmp);
    write_bytes(idx, &d, 8, idx_tmp);
    {
      // Lengths are copied as they are; the pointers are their exclusive prefix sums in bytes.
      const MappedFile lengths(lengths_path());
      MT_CHECK(lengths.size() == 4 * n) << "internal: lengths side file has the wrong size";
      write_bytes(idx, lengths.data(), lengths.size(), idx_tmp);
      const int64_t size = token_dtype_size(dtype_);
      std::vector<int64_t> chunk;
      chunk.reserve(65536);
      int64_t pointer = 0;
      for (uint64_t i = 0; i < n; ++i) {
        chunk.push_back(pointer);
        pointer += static_cast<int64_t>(load<int32_t>(lengths.data() + 4 * i)) * size;
        if (chunk.size() == 65536 || i + 1 == n) {
          write_bytes(idx, chunk.data(), chunk.size() * 8, idx_tmp);
          chunk.clear();
        }
      }
    }
    {
      const MappedFile boundaries(documents_path());
      MT_CHECK(boundaries.size() == 8 * d) << "internal: document side file has the wrong size";
      write_bytes(idx, boundaries.data(), boundaries.size(), idx_tmp);
    }
    close_file(idx, idx_tmp);
  } catch (...) {
    if (idx) std::fclose(idx);
    std::remove(idx_tmp.c_str());
    throw;
  }
  idx_path_ = idx_path;
}

void IndexedDatasetBuilder::commit() {
  MT_CHECK(!finalized_ && !idx_path_.empty()) << "IndexedDatasetBuilder::commit needs write_index first";
  rename_file(temp_path(bin_path_), bin_path_);
  rename_file(temp_path(idx_path_), idx_path_);
  std::remove((lengths_path()).c_str());
  std::remove((documents_path()).c_str());
  finalized_ = true;
}

// --- Reader -----------------------------------------------------------------------------------

bool IndexedDataset::exists(const std::string& prefix) {
  return is_file(idx_path_of(prefix)) && is_file(bin_path_of(prefix));
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = idx_path_of(prefix), bin_path = bin_path_of(prefix);
  MT_CHECK(is_file(idx_path)) << "dataset index " << idx_path << " does not exist; pass the prefix of a "
                              << ".bin/.idx pair written by `megatron preprocess` or Megatron's preprocess_data.py "
                              << "(without the .bin/.idx suffix)";
  MT_CHECK(is_file(bin_path)) << "dataset " << prefix << " has an index but no data file " << bin_path;
  idx_ = std::make_unique<MappedFile>(idx_path);
  bin_ = std::make_unique<MappedFile>(bin_path);
  const uint8_t* p = idx_->data();
  const uint64_t size = idx_->size();
  const char* bad = "is not a Megatron indexed dataset index";
  MT_CHECK(size >= k_header_bytes) << idx_path << " " << bad << ": " << size << " bytes, shorter than the "
                                   << k_header_bytes << "-byte header (truncated?)";
  MT_CHECK(std::memcmp(p, k_magic, 9) == 0) << idx_path << " " << bad << ": wrong magic (expected MMIDIDX\\0\\0)";
  const uint64_t version = load<uint64_t>(p + 9);
  MT_CHECK(version == k_version) << idx_path << ": index version " << version << ", only version 1 is supported";
  const uint8_t code = p[17];
  MT_CHECK(code >= 1 && code <= 8) << idx_path << ": unknown token dtype code " << int(code)
                                   << " (Megatron's codes are 1..8)";
  dtype_ = static_cast<TokenDType>(code);
  MT_CHECK(dtype_ != TokenDType::float32 && dtype_ != TokenDType::float64)
      << idx_path << ": token dtype " << token_dtype_name(dtype_) << " is not an integer type";
  itemsize_ = token_dtype_size(dtype_);
  const uint64_t n = load<uint64_t>(p + 18), d = load<uint64_t>(p + 26);
  // Bounds first, so the byte count below cannot overflow.
  const uint64_t body = size - k_header_bytes;
  MT_CHECK(n <= body / 12 && d <= body / 8)
      << idx_path << ": the header claims " << n << " sequences and " << d << " document-index entries, more than "
      << size << " bytes can hold (truncated or corrupt)";
  const uint64_t expected = k_header_bytes + 12 * n + 8 * d;
  MT_CHECK(size == expected || size == expected + n)
      << idx_path << ": " << size << " bytes, but " << n << " sequences and " << d << " document-index entries need "
      << expected << " (truncated or corrupt)";
  MT_CHECK(d >= 1) << idx_path << ": empty document index (a valid index starts with 0)";
  MT_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      << idx_path << ": " << n << " sequences; GptDataset indexes sequences with int32";
  num_boundaries_ = static_cast<int64_t>(d);
  pointers_offset_ = k_header_bytes + 4 * n;
  boundaries_offset_ = k_header_bytes + 12 * n;

  lengths_.resize(n);
  if (n > 0) std::memcpy(lengths_.data(), p + k_header_bytes, 4 * n);
  // The pointers must be the exclusive prefix sums of lengths × itemsize and the .bin must end
  // where the last sequence does: then every read below is in bounds.
  int64_t pointer = 0;
  for (uint64_t i = 0; i < n; ++i) {
    MT_CHECK(lengths_[i] >= 0) << idx_path << ": sequence " << i << " has negative length " << lengths_[i];
    const int64_t stored = load<int64_t>(p + pointers_offset_ + 8 * i);
    MT_CHECK(stored == pointer) << idx_path << ": sequence " << i << " starts at byte " << stored << " of the .bin, "
                                << "but the lengths before it put it at " << pointer << " (corrupt index)";
    pointer += static_cast<int64_t>(lengths_[i]) * itemsize_;
  }
  MT_CHECK(static_cast<uint64_t>(pointer) == bin_->size())
      << bin_path << " holds " << bin_->size() << " bytes, but " << idx_path << " describes " << pointer << " ("
      << pointer / itemsize_ << " " << token_dtype_name(dtype_) << " tokens): the pair does not match "
      << "(truncated, or the .idx of another dataset)";
  num_tokens_ = pointer / itemsize_;
  int64_t previous = -1;
  for (int64_t k = 0; k < num_boundaries_; ++k) {
    const int64_t b = document_index(k);
    MT_CHECK(k > 0 || b == 0) << idx_path << ": the document index starts at " << b << ", not 0 (corrupt index)";
    MT_CHECK(b >= previous && b <= static_cast<int64_t>(n))
        << idx_path << ": document-index entry " << k << " = " << b << " is out of order or past the " << n
        << " sequences (corrupt index)";
    previous = b;
  }
  MT_CHECK(previous == static_cast<int64_t>(n)) << idx_path << ": the document index ends at " << previous
                                                << ", not at the sequence count " << n << " (corrupt index)";
}

int64_t IndexedDataset::document_index(int64_t k) const {
  MT_CHECK(k >= 0 && k < num_boundaries_) << "document-index entry " << k << " out of range";
  return load<int64_t>(idx_->data() + boundaries_offset_ + 8 * static_cast<uint64_t>(k));
}

void IndexedDataset::read_tokens(int64_t seq, int64_t offset, int64_t length, std::vector<int64_t>& out) const {
  MT_CHECK(seq >= 0 && seq < num_sequences()) << prefix_ << ": sequence " << seq << " out of range";
  const int64_t len = lengths_[static_cast<size_t>(seq)];
  MT_CHECK(offset >= 0 && length >= 0 && offset + length <= len)
      << prefix_ << ": tokens [" << offset << ", " << offset + length << ") outside sequence " << seq << " of " << len;
  const uint8_t* src = bin_->data() + load<int64_t>(idx_->data() + pointers_offset_ + 8 * static_cast<uint64_t>(seq)) +
                       offset * itemsize_;
  const size_t base = out.size();
  out.resize(base + static_cast<size_t>(length));
  int64_t* dst = out.data() + base;
  switch (dtype_) {
    case TokenDType::uint16:
      for (int64_t i = 0; i < length; ++i) dst[i] = load<uint16_t>(src + 2 * i);
      break;
    case TokenDType::int32:
      for (int64_t i = 0; i < length; ++i) dst[i] = load<int32_t>(src + 4 * i);
      break;
    case TokenDType::int64: std::memcpy(dst, src, static_cast<size_t>(8 * length)); break;
    case TokenDType::int16:
      for (int64_t i = 0; i < length; ++i) dst[i] = load<int16_t>(src + 2 * i);
      break;
    case TokenDType::uint8:
      for (int64_t i = 0; i < length; ++i) dst[i] = src[i];
      break;
    case TokenDType::int8:
      for (int64_t i = 0; i < length; ++i) dst[i] = static_cast<int8_t>(src[i]);
      break;
    case TokenDType::float32:
    case TokenDType::float64: MT_FAIL() << "internal: float token dtype";
  }
}

std::vector<int64_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int64_t> out;
  MT_CHECK(i >= 0 && i < num_sequences()) << prefix_ << ": sequence " << i << " out of range";
  read_tokens(i, 0, lengths_[static_cast<size_t>(i)], out);
  return out;
}

void merge_indexed_datasets(const std::vector<std::string>& prefixes, const std::string& output_prefix) {
  MT_CHECK(!prefixes.empty()) << "nothing to merge: no input datasets";
  std::optional<IndexedDatasetBuilder> builder;
  for (const std::string& prefix : prefixes) {
    if (!builder) builder.emplace(bin_path_of(output_prefix), IndexedDataset(prefix).dtype());
    builder->add_index(prefix);
  }
  builder->finalize(idx_path_of(output_prefix));
}

}  // namespace mt
