#include "ckpt/safetensors.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace mt {

namespace {

DType parse_dtype(const std::string& s, const std::string& path, const std::string& name) {
  if (s == "F32") return DType::f32;
  if (s == "BF16") return DType::bf16;
  if (s == "F16") return DType::f16;
  if (s == "I32") return DType::i32;
  if (s == "U8") return DType::u8;
  if (s == "F64") return DType::f64;
  MT_FAIL() << path << ": tensor '" << name << "' has unsupported dtype " << s;
}

const char* dtype_tag(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
    case DType::f64: return "F64";
  }
  return "?";
}

}  // namespace

SafetensorsFile SafetensorsFile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  MT_CHECK(in.good()) << "cannot open safetensors file " << path;
  const auto file_size = static_cast<uint64_t>(in.tellg());
  MT_CHECK(file_size >= 8) << path << ": too short to be a safetensors file (" << file_size << " bytes)";
  in.seekg(0);
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  MT_CHECK(header_len <= file_size - 8) << path << ": header length " << header_len << " exceeds the file size";
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));

  SafetensorsFile f;
  f.path_ = path;
  f.data_.resize(file_size - 8 - header_len);
  in.read(reinterpret_cast<char*>(f.data_.data()), static_cast<std::streamsize>(f.data_.size()));
  MT_CHECK(in.good()) << path << ": read failed";

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    MT_FAIL() << path << ": header is not valid JSON: " << e.what();
  }
  MT_CHECK(j.is_object()) << path << ": header is not a JSON object";
  try {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") {
        for (auto m = it->begin(); m != it->end(); ++m) f.metadata_[m.key()] = m->get<std::string>();
        continue;
      }
      const auto& e = it.value();
      Entry entry;
      entry.dtype = parse_dtype(e.at("dtype").get<std::string>(), path, it.key());
      const auto dims = e.at("shape").get<std::vector<int64_t>>();
      MT_CHECK(dims.size() <= kMaxDims) << path << ": tensor '" << it.key() << "' has too many dimensions";
      for (int64_t d : dims) {
        MT_CHECK(d >= 0) << path << ": tensor '" << it.key() << "' has a negative dimension";
        entry.shape.dims[entry.shape.ndim++] = d;
      }
      const auto offsets = e.at("data_offsets").get<std::vector<uint64_t>>();
      MT_CHECK(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= f.data_.size())
          << path << ": tensor '" << it.key() << "' has data offsets outside the file";
      MT_CHECK(offsets[1] - offsets[0] == static_cast<uint64_t>(entry.shape.numel()) * dtype_size(entry.dtype))
          << path << ": tensor '" << it.key() << "' byte range does not match its shape and dtype";
      entry.offset = offsets[0];
      f.entries_[it.key()] = entry;
    }
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << path << ": malformed header: " << e.what();
  }
  return f;
}

TensorView SafetensorsFile::get(const std::string& name) const {
  auto it = entries_.find(name);
  MT_CHECK(it != entries_.end()) << path_ << ": no tensor named '" << name << "'";
  const Entry& e = it->second;
  return TensorView(const_cast<uint8_t*>(data_.data()) + e.offset, e.dtype, e.shape);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const std::string& SafetensorsFile::meta(const std::string& key) const {
  auto it = metadata_.find(key);
  MT_CHECK(it != metadata_.end()) << path_ << ": metadata has no key '" << key << "'";
  return it->second;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    MT_CHECK(t.device == Device::cpu) << "save_safetensors: tensor '" << name << "' is not in host memory";
    std::vector<int64_t> dims(t.shape.dims, t.shape.dims + t.shape.ndim);
    header[name] = {{"dtype", dtype_tag(t.dtype)}, {"shape", dims}, {"data_offsets", {offset, offset + t.bytes()}}};
    offset += t.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    MT_CHECK(out.good()) << "cannot write " << tmp;
    uint8_t len_bytes[8];
    for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len_bytes), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes()));
    out.flush();
    MT_CHECK(out.good()) << "writing " << tmp << " failed (disk full?)";
  }
  MT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0) << "cannot rename " << tmp << " to " << path;
}

}  // namespace mt
