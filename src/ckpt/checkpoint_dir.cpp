#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace mt {

namespace fs = std::filesystem;

namespace {

const char* kLatest = "latest_checkpointed_iteration.txt";

// fsync a file or a directory (a rename is durable once its directory is synced).
void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  MT_CHECK(fd >= 0) << "cannot open " << path << " to sync it: " << std::strerror(errno);
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  MT_CHECK(ok) << "fsync of " << path << " failed: " << std::strerror(errno);
}

}  // namespace

std::string iteration_dir(const std::string& root, int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", static_cast<long long>(iteration));
  return (fs::path(root) / name).string();
}

std::string committed_iteration_dir(const std::string& root, int64_t iteration) {
  const std::string dir = iteration_dir(root, iteration);
  return !fs::exists(dir) && fs::exists(dir + ".old") ? dir + ".old" : dir;
}

std::string staging_dir(const std::string& root, int64_t iteration) { return iteration_dir(root, iteration) + ".partial"; }

std::optional<int64_t> read_latest_iteration(const std::string& root) {
  const fs::path path = fs::path(root) / kLatest;
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  // Megatron writes the iteration, or "release" for converted checkpoints.
  if (text == "release") return 0;
  int64_t iteration = -1;
  std::istringstream parse(text);
  parse >> iteration;
  MT_CHECK(!parse.fail() && parse.eof() && iteration >= 0)
      << path.string() << " holds \"" << text << "\", not an iteration number";
  return iteration;
}

std::string begin_checkpoint(const std::string& root, int64_t iteration) {
  std::error_code error;
  fs::create_directories(root, error);
  MT_CHECK(!error) << "cannot create the checkpoint directory " << root << ": " << error.message();
  const std::string staging = staging_dir(root, iteration);
  fs::remove_all(staging, error);  // a leftover of a save that was interrupted
  MT_CHECK(!error) << "cannot remove the leftover " << staging << ": " << error.message();
  fs::create_directory(staging, error);
  MT_CHECK(!error) << "cannot create " << staging << ": " << error.message();
  return staging;
}

void commit_checkpoint(const std::string& root, int64_t iteration) {
  const std::string staging = staging_dir(root, iteration), final_dir = iteration_dir(root, iteration);
  MT_CHECK(fs::exists(fs::path(staging) / "manifest.json")) << staging << " has no manifest: nothing to commit";
  sync_path(staging);
  std::error_code error;
  if (fs::exists(final_dir)) {  // a save of the same iteration: set it aside, then drop it
    const std::string old = final_dir + ".old";
    fs::remove_all(old, error);
    fs::rename(final_dir, old, error);
    MT_CHECK(!error) << "cannot move the older " << final_dir << " aside: " << error.message();
  }
  fs::rename(staging, final_dir, error);
  MT_CHECK(!error) << "cannot rename " << staging << " to " << final_dir << ": " << error.message();
  sync_path(root);
  write_file_atomically((fs::path(root) / kLatest).string(), std::to_string(iteration));
  fs::remove_all(final_dir + ".old", error);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  MT_CHECK(fd >= 0) << "cannot create " << tmp << ": " << std::strerror(errno);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  MT_CHECK(written) << "writing " << tmp << " failed: " << std::strerror(errno);
  MT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0) << "cannot rename " << tmp << " to " << path << ": "
                                                         << std::strerror(errno);
  sync_path(fs::path(path).parent_path().string().empty() ? "." : fs::path(path).parent_path().string());
}

void write_manifest(const std::string& dir, nlohmann::json body) {
  body["magic"] = kCheckpointMagic;
  body["version"] = kCheckpointVersion;
  write_file_atomically((fs::path(dir) / "manifest.json").string(), body.dump(2));
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  MT_CHECK(in.good()) << "cannot open " << path;
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    MT_FAIL() << path << " is not valid JSON: " << e.what();
  }
  return j;
}

nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  MT_CHECK(fs::exists(path)) << "checkpoint " << dir << " has no manifest.json (not a megatron.cpp checkpoint, or "
                             << "never committed)";
  const nlohmann::json j = read_json_file(path);
  MT_CHECK(j.is_object() && j.contains("magic") && j.at("magic") == kCheckpointMagic)
      << path << " is not a megatron.cpp checkpoint manifest";
  MT_CHECK(j.contains("version") && j.at("version") == kCheckpointVersion)
      << path << " has version " << (j.contains("version") ? j.at("version").dump() : "none")
      << "; this build reads version " << kCheckpointVersion;
  return j;
}

}  // namespace mt
