// Owns the checkpoint directory layout and its crash-safe commit, as Megatron lays it out:
//   <root>/iter_0000100/              one directory per saved iteration
//   <root>/latest_checkpointed_iteration.txt
// A checkpoint is written into <root>/iter_0000100.partial/, fsync'ed, renamed into place, and
// only then does the "latest" file (written to a temporary name and renamed) point at it: a crash
// at any moment leaves the previous checkpoint whole and "latest" naming it (a re-save of the
// same iteration first sets the old directory aside as <dir>.old, which loads until the new one
// is in place). The manifest
// (manifest.json: magic, version, then what the trainer stores) is written last into the staging
// directory, so a directory without one was never committed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mt {

inline constexpr const char* kCheckpointMagic = "megatron.cpp checkpoint";
inline constexpr int kCheckpointVersion = 1;

std::string iteration_dir(const std::string& root, int64_t iteration);  // <root>/iter_%07d
// Where iteration's checkpoint is to be read: its directory, or, when a re-save of the same
// iteration was interrupted between setting the old one aside and renaming the new one into place,
// the old one (<dir>.old).
std::string committed_iteration_dir(const std::string& root, int64_t iteration);

// The iteration "latest" names; nullopt when root has no such file. A malformed file is an error.
std::optional<int64_t> read_latest_iteration(const std::string& root);

// Creates an empty staging directory for `iteration` (removing a leftover of an interrupted save)
// and returns its path. Call on one rank, then let the others write into it.
std::string begin_checkpoint(const std::string& root, int64_t iteration);
std::string staging_dir(const std::string& root, int64_t iteration);

// The staging directory renamed into place (replacing an older save of the same iteration), then
// "latest" updated. Call on one rank once every file is written.
void commit_checkpoint(const std::string& root, int64_t iteration);

// manifest.json in `dir`: `body` plus "magic" and "version"; fsync'ed.
void write_manifest(const std::string& dir, nlohmann::json body);
// Reads and checks magic and version; errors name the file.
nlohmann::json read_manifest(const std::string& dir);

// The JSON document in `path`; mt::Error naming it when it cannot be read or parsed.
nlohmann::json read_json_file(const std::string& path);

// Writes `text` to `path` through a temporary file, fsync'ed, renamed into place.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace mt
