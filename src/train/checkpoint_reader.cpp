#include "train/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>

#include "backend/backend.h"
#include "train/checkpoint_args.h"

namespace mt {

namespace {

std::vector<ShardFile> map_files(const CheckpointManifest& m, const std::string& dir) {
  std::vector<ShardFile> files;
  for (const auto& [name, digest] : m.files)
    files.push_back(ShardFile::load((std::filesystem::path(dir) / name).string(), digest));
  return files;
}

CheckpointManifest open_manifest(const std::string& root, std::optional<int64_t> step, std::string& dir) {
  const nlohmann::json j = read_checkpoint_manifest(root, step, dir);
  return parse_manifest(j, dir);
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& root, std::optional<int64_t> step)
    : manifest_(open_manifest(root, step, dir_)), tensors_(map_files(manifest_, dir_)) {}

void CheckpointReader::check_model(const ModelConfig& c) const {
  const nlohmann::json expected = model_signature(c);
  const nlohmann::json& saved = manifest_.model;
  for (auto it = expected.begin(); it != expected.end(); ++it)
    MT_CHECK(saved.contains(it.key()) && saved.at(it.key()) == it.value())
        << "checkpoint " << dir_ << " is of another model: its " << it.key() << " is "
        << (saved.contains(it.key()) ? saved.at(it.key()).dump() : "absent") << ", this run's " << it.value().dump();
}

void CheckpointReader::read(const std::string& kind, const Param& p, int64_t begin,
                            const TensorView& dst) {
  Shape shape;
  const std::vector<float>& whole = tensors_.whole(kind, p.name, p.full_shape, shape);
  if (dst.device == Device::cpu) {
    take_piece(whole, shape, p.full_shape, p.shard, p.shard_size, p.shard_rank, p.shard_offset + begin, dst, p.name);
    return;
  }
  // A device tensor is filled from a host copy (the reader's buffer grows to the largest piece once).
  staging_.resize(std::max(staging_.size(), (dst.bytes() + 7) / 8));
  const TensorView host(staging_.data(), dst.dtype, dst.shape);
  take_piece(whole, shape, p.full_shape, p.shard, p.shard_size, p.shard_rank, p.shard_offset + begin, host, p.name);
  backend_for(dst.device).copy_from_host(dst.data, host.data, dst.bytes());
}

void CheckpointReader::read_weights(const std::vector<Param>& params) {
  for (const Param& p : params) read("param", p, 0, p.value.reshape({p.value.numel()}));
}

void CheckpointReader::read_buffers(const std::vector<std::pair<std::string, TensorView>>& buffers) {
  for (const auto& [name, buffer] : buffers) {
    MT_CHECK(has("buffer", name)) << "checkpoint " << dir_ << " has no " << name
                                  << " (saved without --moe-router-enable-expert-bias?)";
    Shape shape;
    const std::vector<float>& whole = this->whole("buffer", name, buffer.shape, shape);
    backend_for(buffer.device).copy_from_host(buffer.data, whole.data(), buffer.bytes());
  }
}

}  // namespace mt
