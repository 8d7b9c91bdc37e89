// Owns `megatron preprocess` (Megatron-LM's tools/preprocess_data.py without sentence splitting):
// JSON lines in, one .bin/.idx pair per JSON key out, `{output_prefix}_{key}_document`. Each line
// is one document; a key's value is a string (one sequence) or a list of strings (one sequence
// per non-empty tokenization); --append-eod adds the tokenizer's EOD to a non-empty document.
// The token dtype follows the tokenizer's vocabulary (uint16 below 65500, else int32), so the
// files equal Megatron's byte for byte for the same tokens.
//
// Streaming: a reader hands batches of lines to `workers` threads, each with its own tokenizer;
// the caller's thread writes finished batches strictly in input order, and at most a few
// batches per worker are in flight, so memory does not grow with the input and the output is
// the same for any number of workers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace mt {

struct PreprocessOptions {
  std::string input;                              // --input: a JSON-lines file or a glob of several
  std::vector<std::string> json_keys = {"text"};  // --json-keys
  std::string output_prefix;                      // --output-prefix
  bool append_eod = false;                        // --append-eod
  int64_t workers = 1;                            // --workers: tokenizing threads
  int64_t batch_lines = 256;                      // lines per unit of work
};

struct PreprocessProgress {
  int64_t documents = 0;  // JSON lines done (blank lines not counted)
  int64_t bytes = 0;      // input bytes done
  double seconds = 0.0;   // since the start
};

struct PreprocessResult {
  PreprocessProgress totals;
  std::vector<std::string> output_prefixes;  // one per key, in --json-keys order
  std::vector<int64_t> tokens;                // tokens written per key
};

// The files a glob matches, sorted by name (a plain path matches itself). Throws when none does.
std::vector<std::string> expand_input_glob(const std::string& pattern);

// Runs the whole conversion. `make_tokenizer` is called once per worker. `progress` (may be
// empty) is called from the caller's thread about every `progress_interval_s` seconds and once
// at the end. Errors name the file and line: a line that is not a JSON object, a missing key, a
// value that is neither a string nor a list of strings. Blank lines are skipped. On error no
// output file is left behind.
PreprocessResult preprocess_json_lines(const PreprocessOptions& options,
                                       const std::function<std::unique_ptr<Tokenizer>()>& make_tokenizer,
                                       const std::function<void(const PreprocessProgress&)>& progress = {},
                                       double progress_interval_s = 2.0);

// The dataset prefixes `--merge --input` names, sorted: every .bin/.idx pair in a directory
// (tools/merge_datasets.py), or the pairs a glob matches (PATTERN may match the prefixes or their
// .bin/.idx files). Throws when a pair is incomplete or nothing matches.
std::vector<std::string> list_dataset_prefixes(const std::string& input);

}  // namespace mt
