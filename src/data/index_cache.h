// Owns the on-disk cache of GptDataset indices (--data-cache-path; Megatron's
// GPTDataset_indices directory, in a format of our own): building the document, sample and
// shuffle indices of a large corpus takes long, so they are built once and reloaded. One file per
// dataset split, `{cache_dir}/{fnv64 of description}-GPTDataset-{split}-indices.mtidx`:
//   "MTGPTIDX" | u32 version = 1 | u32 0 | u64 description bytes | description (JSON of everything
//   the indices depend on) | i64 tokens per epoch | i64 epochs | u8 separate final epoch |
//   u64 n, i32 document index[n] | u64 n, i64 sample index[n] | u64 n, i64 shuffle index[n]
// A file whose description differs (hash collision, other data) or that fails any size check is
// ignored and rewritten; files are written to a temporary name and renamed.
#pragma once

#include <optional>
#include <string>

#include "data/gpt_dataset.h"

namespace mt {

// The cache file for `description` of split `split` under `cache_dir`.
std::string gpt_index_cache_path(const std::string& cache_dir, const std::string& description, Split split);

// The indices stored at `path`, if it exists, is intact and was written for `description`.
std::optional<GptDatasetIndices> load_gpt_indices(const std::string& path, const std::string& description);

// Writes the indices (creating the directory). Throws mt::Error naming the path on failure.
void save_gpt_indices(const std::string& path, const std::string& description, const GptDatasetIndices& indices);

}  // namespace mt
