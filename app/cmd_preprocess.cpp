// `megatron preprocess`: Megatron-LM's tools/preprocess_data.py (JSON lines to .bin/.idx, one
// pair per --json-keys key) and, with --merge, tools/merge_datasets.py. The work is in
// data/preprocess.h; this file maps flags and prints progress (stderr) and a summary (stdout).
#include <cstdio>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/options.h"
#include "app/tokenizer_flags.h"
#include "base/error.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"

namespace mt {

namespace {

int merge(const Options& o) {
  MT_CHECK(o.has("--input")) << "--merge needs --input (a directory of .bin/.idx pairs or a glob of prefixes)";
  MT_CHECK(o.has("--output-prefix")) << "--merge needs --output-prefix (the merged pair's path without .bin/.idx)";
  const std::vector<std::string> prefixes = list_dataset_prefixes(o.text("--input"));
  const std::string out = o.text("--output-prefix");
  for (const std::string& p : prefixes)
    MT_CHECK(p != out) << "--output-prefix " << out << " is also an input; write the merge elsewhere";
  merge_indexed_datasets(prefixes, out);
  const IndexedDataset merged(out);
  std::printf("merged %zu datasets into %s.{bin,idx}: %lld documents, %lld sequences, %lld tokens (%s)\n",
              prefixes.size(), out.c_str(), static_cast<long long>(merged.num_documents()),
              static_cast<long long>(merged.num_sequences()), static_cast<long long>(merged.num_tokens()),
              token_dtype_name(merged.dtype()));
  return 0;
}

}  // namespace

int cmd_preprocess(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(options_help("preprocess").c_str(), stdout);
      return 0;
    }
  const Options o = parse_options("preprocess", args);
  if (o.flag("--merge")) return merge(o);
  MT_CHECK(o.has("--input")) << "pass --input (a JSON-lines file, or a glob such as 'corpus/*.jsonl')";
  MT_CHECK(o.has("--output-prefix")) << "pass --output-prefix (outputs are PREFIX_{key}_document.bin/.idx)";
  const TokenizerOptions tokenizer = tokenizer_options(o);
  PreprocessOptions p;
  p.input = o.text("--input");
  p.json_keys = o.list("--json-keys");
  p.output_prefix = o.text("--output-prefix");
  p.append_eod = o.flag("--append-eod");
  p.workers = o.integer("--workers");
  const auto progress = [](const PreprocessProgress& s) {
    const double mb = static_cast<double>(s.bytes) / (1024.0 * 1024.0);
    std::fprintf(stderr, "preprocess: %lld documents, %.1f MB, %.2f MB/s\n", static_cast<long long>(s.documents), mb,
                 s.seconds > 0 ? mb / s.seconds : 0.0);
  };
  const PreprocessResult r = preprocess_json_lines(p, [&] { return make_tokenizer(tokenizer); }, progress);
  for (size_t k = 0; k < r.output_prefixes.size(); ++k)
    std::printf("wrote %s.{bin,idx}: %lld documents, %lld tokens\n", r.output_prefixes[k].c_str(),
                static_cast<long long>(r.totals.documents), static_cast<long long>(r.tokens[k]));
  return 0;
}

}  // namespace mt
