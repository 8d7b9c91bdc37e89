#include "ckpt/shard_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
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

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
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
  auto put = [&](const void* data, size_t bytes) {
    write_all(fd, data, bytes, path);
    digest.checksum = fnv1a64(data, bytes, digest.checksum);
    digest.bytes += bytes;
  };
  digest.checksum = fnv1a64(nullptr, 0);
  put(length, 8);
  put(text.data(), text.size());
  for (const TensorRecord& r : records) put(r.data.data, r.data.bytes());
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  MT_CHECK(synced) << "fsync of " << path << " failed: " << std::strerror(errno);
  return digest;
}

ShardFile ShardFile::load(const std::string& path, const FileDigest& expected) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MT_CHECK(in.good()) << "checkpoint file " << path << " is missing or unreadable";
  const auto size = static_cast<uint64_t>(in.tellg());
  MT_CHECK(size == expected.bytes) << "checkpoint file " << path << " holds " << size << " bytes, the manifest says "
                                   << expected.bytes << " (truncated or replaced)";
  ShardFile f;
  f.bytes_.resize(size);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(f.bytes_.data()), static_cast<std::streamsize>(size));
  MT_CHECK(in.good()) << "reading checkpoint file " << path << " failed";
  MT_CHECK(fnv1a64(f.bytes_.data(), f.bytes_.size()) == expected.checksum)
      << "checkpoint file " << path << " is corrupted (its checksum differs from the manifest's)";
  // The checksum vouches for the bytes; the parse below still refuses anything malformed.
  MT_CHECK(size >= 8) << path << ": too short";
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f.bytes_[static_cast<size_t>(i)];
  MT_CHECK(header_len <= size - 8) << path << ": header length exceeds the file";
  const size_t data_start = 8 + header_len;
  try {
    const nlohmann::json header = nlohmann::json::parse(f.bytes_.begin() + 8, f.bytes_.begin() + 8 + header_len);
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
      r.data = TensorView(f.bytes_.data() + data_start + offsets[0], dtype, {r.end - r.begin});
      f.records_.push_back(r);
    }
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << path << ": malformed header: " << e.what();
  }
  return f;
}

}  // namespace mt
