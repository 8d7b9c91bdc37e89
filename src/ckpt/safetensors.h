// Owns reading and writing Hugging Face safetensors files: an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then raw
// row-major little-endian data.  Used for reference fixtures now and HF import/export later.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace mt {

class SafetensorsFile {
 public:
  // Reads and validates the whole file; any inconsistency is an mt::Error naming the file.
  static SafetensorsFile load(const std::string& path);

  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  // A host view into the loaded bytes (valid while this object lives).
  TensorView get(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // metadata value, or mt::Error when missing.
  const std::string& meta(const std::string& key) const;

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    size_t offset;
  };
  std::string path_;
  std::vector<uint8_t> data_;  // the bytes after the header
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes host tensors atomically (temporary file, then rename).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace mt
