// Owns read-only memory mapping of a whole file (the .bin/.idx readers and the index cache use
// it) and the write-to-temp-then-rename helper every file we produce goes through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mt {

class MappedFile {
 public:
  // Maps `path` read-only; an empty file maps to size 0 with a null data pointer.
  // Throws mt::Error naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// rename(from, to), throwing mt::Error naming both on failure.
void rename_file(const std::string& from, const std::string& to);

// The temporary name a file is written under before it is renamed into place.
inline std::string temp_path(const std::string& path) { return path + ".tmp"; }

}  // namespace mt
