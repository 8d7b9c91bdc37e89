#include "ckpt/shard_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"

namespace mt {

namespace {

const char* dtype_tag(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    default: MT_FAIL() << "checkpoint: cannot store a " << dtype_name(t) << " tensor";
  }
}

DType parse_dtype(const std::string& s, const std::string& path) {
  if (s == "F32") return DType::f32;
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  MT_FAIL() << path << ": unsupported dtype " << s;
}

// Writes all of `bytes`, checking each call (a full disk is an error, not a short file).
void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n > 0) << "writing " << path << " failed: " << std::strerror(errno);
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

namespace {
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;
}  // namespace

void Checksum::add(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  length_ += bytes;
  while (bytes > 0 && pending_bytes_ > 0 && pending_bytes_ < 8) {  // finish a word begun earlier
    pending_[pending_bytes_++] = *p++;
    --bytes;
  }
  if (pending_bytes_ == 8) {
    uint64_t word = 0;
    std::memcpy(&word, pending_, 8);
    hash_ = (hash_ ^ word) * kFnvPrime;
    pending_bytes_ = 0;
  }
  for (; bytes >= 8; p += 8, bytes -= 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);  // little-endian hosts only (as safetensors itself)
    hash_ = (hash_ ^ word) * kFnvPrime;
  }
  for (; bytes > 0; --bytes) pending_[pending_bytes_++] = *p++;
}

uint64_t Checksum::value() const {
  uint64_t h = hash_;
  for (size_t i = 0; i < pending_bytes_; ++i) h = (h ^ pending_[i]) * kFnvPrime;
  return (h ^ length_) * kFnvPrime;
}

uint64_t checksum_of(const void* data, size_t bytes) {
  Checksum c;
  c.add(data, bytes);
  return c.value();
}

FileDigest write_shard_file(const std::string& path, const std::vector<TensorRecord>& records) {
  nlohmann::json header = nlohmann::json::object(), meta = nlohmann::json::object();
  std::set<std::string> keys;
  uint64_t offset = 0;
  for (const TensorRecord& r : records) {
    MT_CHECK(keys.insert(r.key()).second) << "checkpoint: two pieces named " << r.key() << " in " << path;
    MT_CHECK(r.data.device == Device::cpu && r.data.numel() == r.end - r.begin)
        << "checkpoint: piece " << r.key() << " must be a host tensor of " << r.end - r.begin << " elements";
    header[r.key()] = {{"dtype", dtype_tag(r.data.dtype)},
                       {"shape", {r.data.numel()}},
                       {"data_offsets", {offset, offset + r.data.bytes()}}};
    offset += r.data.bytes();
    const std::vector<int64_t> dims(r.global_shape.dims, r.global_shape.dims + r.global_shape.ndim);
    meta[r.key()] = nlohmann::json{{"name", r.name},        {"kind", r.kind},       {"global_shape", dims},
                                   {"shard_dim", r.shard_dim}, {"shard_groups", r.shard_groups},
                                   {"tp_rank", r.tp_rank},  {"tp_size", r.tp_size}, {"begin", r.begin},
                                   {"end", r.end}}
                        .dump();
  }
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MT_CHECK(fd >= 0) << "cannot create " << path << ": " << std::strerror(errno);
  FileDigest digest;
  Checksum checksum;
  auto put = [&](const void* data, size_t bytes) {
    write_all(fd, data, bytes, path);
    checksum.add(data, bytes);
    digest.bytes += bytes;
  };
  put(length, 8);
  put(text.data(), text.size());
  for (const TensorRecord& r : records) put(r.data.data, r.data.bytes());
  digest.checksum = checksum.value();
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  MT_CHECK(synced) << "fsync of " << path << " failed: " << std::strerror(errno);
  return digest;
}

ShardFile::ShardFile(ShardFile&& other) noexcept
    : bytes_(other.bytes_), size_(other.size_), records_(std::move(other.records_)) {
  other.bytes_ = nullptr;
  other.size_ = 0;
}

ShardFile::~ShardFile() {
  if (bytes_ != nullptr) ::munmap(const_cast<uint8_t*>(bytes_), size_);
}

ShardFile ShardFile::load(const std::string& path, const FileDigest& expected) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  MT_CHECK(fd >= 0) << "checkpoint file " << path << " is missing or unreadable: " << std::strerror(errno);
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  const auto size = static_cast<uint64_t>(stated ? st.st_size : 0);
  if (!stated || size != expected.bytes || size == 0) {
    ::close(fd);
    MT_CHECK(stated) << "cannot stat checkpoint file " << path;
    MT_FAIL() << "checkpoint file " << path << " holds " << size << " bytes, the manifest says " << expected.bytes
              << " (truncated or replaced)";
  }
  // Mapped, not read: no copy, and the page cache's pages serve the checksum and the loader.
  // MAP_POPULATE: the pages are mapped in one go rather than one fault at a time.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  ::close(fd);
  MT_CHECK(map != MAP_FAILED) << "cannot map checkpoint file " << path << ": " << std::strerror(errno);
  ShardFile f;
  f.bytes_ = static_cast<const uint8_t*>(map);
  f.size_ = size;
  MT_CHECK(checksum_of(f.bytes_, f.size_) == expected.checksum)
      << "checkpoint file " << path << " is corrupted (its checksum differs from the manifest's)";
  // The checksum vouches for the bytes; the parse below still refuses anything malformed.
  MT_CHECK(size >= 8) << path << ": too short";
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f.bytes_[i];
  MT_CHECK(header_len <= size - 8) << path << ": header length exceeds the file";
  const size_t data_start = 8 + header_len;
  try {
    const nlohmann::json header = nlohmann::json::parse(f.bytes_ + 8, f.bytes_ + 8 + header_len);
    const nlohmann::json& meta = header.at("__metadata__");
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      const nlohmann::json m = nlohmann::json::parse(meta.at(it.key()).get<std::string>());
      TensorRecord r;
      r.name = m.at("name").get<std::string>();
      r.kind = m.at("kind").get<std::string>();
      const auto dims = m.at("global_shape").get<std::vector<int64_t>>();
      MT_CHECK(dims.size() <= kMaxDims) << path << ": " << it.key() << " has too many dimensions";
      for (int64_t d : dims) r.global_shape.dims[r.global_shape.ndim++] = d;
      r.shard_dim = m.at("shard_dim").get<int>();
      r.shard_groups = m.at("shard_groups").get<int>();
      r.tp_rank = m.at("tp_rank").get<int>();
      r.tp_size = m.at("tp_size").get<int>();
      r.begin = m.at("begin").get<int64_t>();
      r.end = m.at("end").get<int64_t>();
      const DType dtype = parse_dtype(it->at("dtype").get<std::string>(), path);
      const auto offsets = it->at("data_offsets").get<std::vector<uint64_t>>();
      MT_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && data_start + offsets[1] <= size &&
               offsets[1] - offsets[0] == static_cast<uint64_t>(r.end - r.begin) * dtype_size(dtype) && r.begin <= r.end)
          << path << ": piece " << it.key() << " has an inconsistent byte range";
      r.data = TensorView(const_cast<uint8_t*>(f.bytes_) + data_start + offsets[0], dtype, {r.end - r.begin});
      f.records_.push_back(r);
    }
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << path << ": malformed header: " << e.what();
  }
  return f;
}

}  // namespace mt
