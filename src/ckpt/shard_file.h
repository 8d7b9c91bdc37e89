// Owns a checkpoint shard file: the tensor pieces one rank saves, each a flat range of that
// rank's tensor-parallel shard of a global tensor (Megatron's ShardedTensor: name, dtype, global
// shape, which slice, replica), stored as a safetensors file any safetensors reader can open (one
// 1-D tensor per piece, named "<kind>/<name>"; the slice description in the metadata under the
// same key). Written with a 64-bit checksum of every byte (Checksum) and fsync'ed; read back with
// the size and checksum the manifest recorded, so a truncated or corrupted file is an error
// naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace mt {

// One piece of a global tensor: elements [begin, end) of the flattened shard that tensor-parallel
// rank tp_rank of tp_size holds under the split (shard_dim, shard_groups) (parallel/shard.h's
// ShardSpec; shard_dim -1: every tp rank holds the whole tensor).
struct TensorRecord {
  std::string name;  // the parameter's global name
  std::string kind;  // "param", "exp_avg", "exp_avg_sq", "main_param"
  Shape global_shape;
  int shard_dim = -1;
  int shard_groups = 1;
  int tp_rank = 0, tp_size = 1;
  int64_t begin = 0, end = 0;
  TensorView data;  // host, [end - begin] elements

  std::string key() const { return kind + "/" + name; }
};

// Size and checksum of a written file, as the manifest records them.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // Checksum of every byte
  bool operator==(const FileDigest&) const = default;
};

// FNV-1a's step over 64-bit little-endian words instead of bytes (8x fewer dependent multiplies:
// a checkpoint is checked at disk speed), then the last partial word byte by byte, then the
// length. Fed in pieces of any size; the same bytes give the same value however they are split.
class Checksum {
 public:
  void add(const void* data, size_t bytes);
  uint64_t value() const;

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
  uint64_t length_ = 0;
  uint8_t pending_[8] = {};
  size_t pending_bytes_ = 0;
};

uint64_t checksum_of(const void* data, size_t bytes);

// Writes the records to `path` (no temporary: the caller writes into a staging directory) and
// fsyncs it. Keys must be unique.
FileDigest write_shard_file(const std::string& path, const std::vector<TensorRecord>& records);

class ShardFile {
 public:
  // Maps `path` and checks it against `expected` (size, then checksum) before parsing; every
  // problem is an mt::Error naming the file.
  static ShardFile load(const std::string& path, const FileDigest& expected);
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&&) = delete;
  ShardFile(const ShardFile&) = delete;
  ~ShardFile();
  // The records, their data pointing into the mapped file.
  const std::vector<TensorRecord>& records() const { return records_; }

 private:
  ShardFile() = default;
  const uint8_t* bytes_ = nullptr;  // the file, mapped read-only
  size_t size_ = 0;
  std::vector<TensorRecord> records_;
};

}  // namespace mt
