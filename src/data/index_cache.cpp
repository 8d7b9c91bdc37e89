// Owns the GptDataset index cache files (see index_cache.h).
#include "data/index_cache.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "base/error.h"
#include "data/mapped_file.h"

namespace mt {

namespace {
constexpr char k_magic[8] = {'M', 'T', 'G', 'P', 'T', 'I', 'D', 'X'};
constexpr uint32_t k_version = 1;

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Bounds-checked reads from a mapped file; any overrun marks the file as unusable.
struct Cursor {
  const uint8_t* p;
  uint64_t size, at = 0;
  bool ok = true;
  bool read(void* out, uint64_t n) {
    if (!ok || n > size - at) return ok = false;
    std::memcpy(out, p + at, n);
    at += n;
    return true;
  }
  template <typename T>
  bool array(std::vector<T>& v) {
    uint64_t n = 0;
    if (!read(&n, 8) || n > (size - at) / sizeof(T)) return ok = false;
    v.resize(n);
    return read(v.data(), n * sizeof(T));
  }
};
}  // namespace

std::string gpt_index_cache_path(const std::string& cache_dir, const std::string& description, Split split) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(description)));
  return cache_dir + "/" + hash + "-GPTDataset-" + split_name(split) + "-indices.mtidx";
}

std::optional<GptDatasetIndices> load_gpt_indices(const std::string& path, const std::string& description) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  const MappedFile file(path);
  Cursor c{file.data(), file.size()};
  char magic[8];
  uint32_t version = 0, reserved = 0;
  std::string stored;
  uint64_t length = 0;
  if (!c.read(magic, 8) || std::memcmp(magic, k_magic, 8) != 0 || !c.read(&version, 4) || version != k_version ||
      !c.read(&reserved, 4) || !c.read(&length, 8) || length > c.size - c.at)
    return std::nullopt;
  stored.assign(reinterpret_cast<const char*>(c.p + c.at), length);
  c.at += length;
  if (stored != description) return std::nullopt;
  GptDatasetIndices out;
  uint8_t separate = 0;
  c.read(&out.tokens_per_epoch, 8);
  c.read(&out.num_epochs, 8);
  c.read(&separate, 1);
  out.separate_final_epoch = separate != 0;
  c.array(out.document_index);
  c.array(out.sample_index);
  c.array(out.shuffle_index);
  if (!c.ok || c.at != c.size) return std::nullopt;
  return out;
}

void save_gpt_indices(const std::string& path, const std::string& description, const GptDatasetIndices& indices) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_CHECK(!ec) << "cannot create the dataset index cache " << dir.string() << ": " << ec.message()
                << "; point --data-cache-path at a writable directory";
  // Per process: ranks that build the same indices at once must not share a temporary file.
  const std::string tmp = temp_path(path) + "." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MT_CHECK(f != nullptr) << "cannot write " << tmp << ": " << std::strerror(errno)
                         << "; point --data-cache-path at a writable directory";
  bool ok = true;
  const auto put = [&](const void* data, size_t n) { ok = ok && (n == 0 || std::fwrite(data, 1, n, f) == n); };
  const uint32_t reserved = 0;
  const uint64_t length = description.size();
  const uint8_t separate = indices.separate_final_epoch ? 1 : 0;
  put(k_magic, 8);
  put(&k_version, 4);
  put(&reserved, 4);
  put(&length, 8);
  put(description.data(), description.size());
  put(&indices.tokens_per_epoch, 8);
  put(&indices.num_epochs, 8);
  put(&separate, 1);
  const auto array = [&](const auto& v) {
    const uint64_t n = v.size();
    put(&n, 8);
    put(v.data(), n * sizeof(v[0]));
  };
  array(indices.document_index);
  array(indices.sample_index);
  array(indices.shuffle_index);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) std::remove(tmp.c_str());
  MT_CHECK(ok) << "cannot write " << tmp << " (disk full?)";
  rename_file(tmp, path);
}

}  // namespace mt
