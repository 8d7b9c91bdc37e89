// Owns the JSON-lines-to-.bin/.idx pipeline (see preprocess.h).
#include "data/preprocess.h"

#include <glob.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "data/indexed_dataset.h"

namespace mt {

namespace {

struct Batch {
  int64_t id = 0;
  const std::string* file = nullptr;
  int64_t first_line = 0;          // 1-based line number of lines[0]
  std::vector<std::string> lines;  // without their newline
  int64_t bytes = 0;
};

// One key's part of an encoded batch: the documents' tokens back to back, the sequence lengths
// and how many sequences each document has.
struct KeyOutput {
  std::vector<int32_t> tokens, lengths, sequences_per_document;
};

struct Encoded {
  std::vector<KeyOutput> keys;
  int64_t documents = 0, bytes = 0;
  std::exception_ptr error;
};

bool blank(const std::string& line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  return true;
}

// Encoder.encode of preprocess_data.py for one batch.
Encoded encode_batch(const Batch& batch, const std::vector<std::string>& keys, bool append_eod,
                     const Tokenizer& tokenizer) {
  Encoded out;
  out.keys.resize(keys.size());
  out.bytes = batch.bytes;
  for (size_t l = 0; l < batch.lines.size(); ++l) {
    const std::string& line = batch.lines[l];
    if (blank(line)) continue;
    const int64_t line_no = batch.first_line + static_cast<int64_t>(l);
    const auto where = [&] { return *batch.file + ":" + std::to_string(line_no); };
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      MT_FAIL() << where() << ": not a valid JSON line (" << e.what() << ")";
    }
    MT_CHECK(doc.is_object()) << where() << ": expected a JSON object per line, got " << doc.type_name();
    for (size_t k = 0; k < keys.size(); ++k) {
      const auto it = doc.find(keys[k]);
      if (it == doc.end()) {
        std::string present;
        for (const auto& item : doc.items()) present += (present.empty() ? "" : ", ") + item.key();
        MT_FAIL() << where() << ": no key \"" << keys[k] << "\" (the line has: " << present
                  << "); pick the keys with --json-keys";
      }
      KeyOutput& ko = out.keys[k];
      const size_t sequences_before = ko.lengths.size();
      const auto add_sentence = [&](const nlohmann::json& value) {
        MT_CHECK(value.is_string()) << where() << ": key \"" << keys[k]
                                    << "\" must hold a string or a list of strings, got " << value.type_name();
        const size_t before = ko.tokens.size();
        try {
          tokenizer.encode_into(value.get_ref<const std::string&>(), ko.tokens);
        } catch (const Error& e) {
          MT_FAIL() << where() << ": key \"" << keys[k] << "\": " << e.what();
        }
        const size_t n = ko.tokens.size() - before;
        if (n == 0) return;  // empty tokenizations are skipped, as in Megatron
        MT_CHECK(n <= static_cast<size_t>(INT32_MAX)) << where() << ": a sequence of " << n << " tokens";
        ko.lengths.push_back(static_cast<int32_t>(n));
      };
      if (it->is_array()) {
        for (const auto& sentence : *it) add_sentence(sentence);
      } else {
        add_sentence(*it);
      }
      if (append_eod && ko.lengths.size() > sequences_before) {
        ko.tokens.push_back(static_cast<int32_t>(tokenizer.eod()));
        ko.lengths.back() += 1;
      }
      ko.sequences_per_document.push_back(static_cast<int32_t>(ko.lengths.size() - sequences_before));
    }
    ++out.documents;
  }
  return out;
}

// Reads the input files line by line into batches.
class LineReader {
 public:
  LineReader(std::vector<std::string> files, int64_t batch_lines) : files_(std::move(files)), batch_lines_(batch_lines) {}

  std::optional<Batch> next() {
    Batch b;
    while (true) {
      if (!in_.is_open()) {
        if (file_ >= files_.size()) return std::nullopt;
        in_.open(files_[file_], std::ios::binary);
        MT_CHECK(in_.good()) << "cannot read " << files_[file_];
        line_ = 0;
      }
      b.file = &files_[file_];
      b.first_line = line_ + 1;
      std::string line;
      while (static_cast<int64_t>(b.lines.size()) < batch_lines_ && std::getline(in_, line)) {
        ++line_;
        b.bytes += static_cast<int64_t>(line.size()) + 1;
        b.lines.push_back(std::move(line));
      }
      if (static_cast<int64_t>(b.lines.size()) == batch_lines_) break;
      MT_CHECK(!in_.bad()) << "error reading " << files_[file_];
      in_.close();
      ++file_;
      if (!b.lines.empty()) break;  // a batch never spans two files, so line numbers stay simple
    }
    b.id = next_id_++;
    return b;
  }

 private:
  std::vector<std::string> files_;
  int64_t batch_lines_;
  size_t file_ = 0;
  int64_t line_ = 0, next_id_ = 0;
  std::ifstream in_;
};

// Worker threads and the bounded queues between them and the writer.
class Pool {
 public:
  Pool(int64_t workers, const std::function<std::unique_ptr<Tokenizer>()>& make_tokenizer,
       const std::vector<std::string>& keys, bool append_eod)
      : keys_(keys), append_eod_(append_eod) {
    // Tokenizers are built here, on the caller's thread, so a bad tokenizer file fails fast.
    for (int64_t w = 0; w < workers; ++w) tokenizers_.push_back(make_tokenizer());
    for (int64_t w = 0; w < workers; ++w) threads_.emplace_back([this, w] { run(*tokenizers_[w]); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  const Tokenizer& tokenizer() const { return *tokenizers_.front(); }

  void submit(Batch b) {
    std::lock_guard<std::mutex> lock(mu_);
    work_.push_back(std::move(b));
    cv_work_.notify_one();
  }

  // The result of batch `id`, waiting for it.
  Encoded take(int64_t id) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [&] { return done_.count(id) > 0; });
    Encoded e = std::move(done_[id]);
    done_.erase(id);
    return e;
  }

 private:
  void run(const Tokenizer& tokenizer) {
    while (true) {
      Batch b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_work_.wait(lock, [&] { return stop_ || !work_.empty(); });
        if (stop_) return;
        b = std::move(work_.front());
        work_.pop_front();
      }
      Encoded e;
      try {
        e = encode_batch(b, keys_, append_eod_, tokenizer);
      } catch (...) {
        e.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_[b.id] = std::move(e);
      }
      cv_done_.notify_all();
    }
  }

  const std::vector<std::string>& keys_;
  bool append_eod_;
  std::vector<std::unique_ptr<Tokenizer>> tokenizers_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<Batch> work_;
  std::map<int64_t, Encoded> done_;
  bool stop_ = false;
};

// The paths matching a shell glob in byte order (glob's own order follows the locale); none on no match.
std::vector<std::string> glob_paths(const std::string& pattern) {
  glob_t g{};
  std::vector<std::string> paths;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

std::vector<std::string> expand_input_glob(const std::string& pattern) {
  MT_CHECK(!pattern.empty()) << "pass --input (a JSON-lines file or a glob such as 'data/*.jsonl')";
  std::vector<std::string> files = glob_paths(pattern);
  MT_CHECK(!files.empty()) << "--input " << pattern << " matches no file";
  return files;
}

std::vector<std::string> list_dataset_prefixes(const std::string& input) {
  namespace fs = std::filesystem;
  MT_CHECK(!input.empty()) << "pass --input (a directory of .bin/.idx pairs, or a glob of prefixes)";
  std::set<std::string> prefixes;
  const auto add = [&](const std::string& path) {
    std::string prefix = path;
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".bin" || ext == ".idx") prefix = path.substr(0, path.size() - 4);
    MT_CHECK(IndexedDataset::exists(prefix))
        << prefix << " is not a complete dataset: both " << idx_path_of(prefix) << " and " << bin_path_of(prefix)
        << " must exist";
    prefixes.insert(prefix);
  };
  if (fs::is_directory(input)) {
    for (const auto& entry : fs::directory_iterator(input)) {
      const std::string ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".bin" || ext == ".idx")) add(entry.path().string());
    }
    MT_CHECK(!prefixes.empty()) << "directory " << input << " holds no .bin/.idx pair to merge";
  } else {
    for (const std::string& path : glob_paths(input)) add(path);
    if (prefixes.empty() && IndexedDataset::exists(input)) prefixes.insert(input);
    MT_CHECK(!prefixes.empty()) << "--input " << input << " matches no dataset (give a directory or a glob of prefixes)";
  }
  return {prefixes.begin(), prefixes.end()};
}

PreprocessResult preprocess_json_lines(const PreprocessOptions& options,
                                       const std::function<std::unique_ptr<Tokenizer>()>& make_tokenizer,
                                       const std::function<void(const PreprocessProgress&)>& progress,
                                       double progress_interval_s) {
  MT_CHECK(!options.output_prefix.empty()) << "pass --output-prefix (the output path without _{key}_document.bin)";
  MT_CHECK(!options.json_keys.empty()) << "--json-keys needs at least one key";
  MT_CHECK(options.workers >= 1) << "--workers must be at least 1, got " << options.workers;
  MT_CHECK(options.batch_lines >= 1) << "batch of " << options.batch_lines << " lines";
  const std::vector<std::string> files = expand_input_glob(options.input);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  Pool pool(options.workers, make_tokenizer, options.json_keys, options.append_eod);
  // The dtype follows the vocabulary, as preprocess_data.py's DType.optimal_dtype.
  const TokenDType dtype = optimal_token_dtype(pool.tokenizer().vocab_size());
  PreprocessResult result;
  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string& key : options.json_keys) {
    result.output_prefixes.push_back(options.output_prefix + "_" + key + "_document");
    builders.push_back(std::make_unique<IndexedDatasetBuilder>(bin_path_of(result.output_prefixes.back()), dtype));
  }

  LineReader reader(files, options.batch_lines);
  const int64_t max_in_flight = 2 * options.workers + 1;
  int64_t submitted = 0, written = 0;
  double last_report = 0.0;
  const auto write_next = [&] {
    Encoded e = pool.take(written++);
    if (e.error) std::rethrow_exception(e.error);
    for (size_t k = 0; k < builders.size(); ++k) {
      const KeyOutput& ko = e.keys[k];
      size_t tok = 0, seq = 0;
      for (int32_t n : ko.sequences_per_document) {
        const std::span<const int32_t> lengths(ko.lengths.data() + seq, static_cast<size_t>(n));
        size_t count = 0;
        for (int32_t l : lengths) count += static_cast<size_t>(l);
        builders[k]->add_document(std::span<const int32_t>(ko.tokens.data() + tok, count), lengths);
        tok += count;
        seq += static_cast<size_t>(n);
      }
    }
    result.totals.documents += e.documents;
    result.totals.bytes += e.bytes;
    if (progress && elapsed() - last_report >= progress_interval_s) {
      last_report = elapsed();
      result.totals.seconds = last_report;
      progress(result.totals);
    }
  };
  while (std::optional<Batch> b = reader.next()) {
    while (submitted - written >= max_in_flight) write_next();
    pool.submit(std::move(*b));
    ++submitted;
  }
  while (written < submitted) write_next();

  // Every key's index is written before any file moves into place, so a failure leaves no output.
  for (size_t k = 0; k < builders.size(); ++k) {
    result.tokens.push_back(builders[k]->num_tokens());
    builders[k]->write_index(idx_path_of(result.output_prefixes[k]));
  }
  for (auto& b : builders) b->commit();
  result.totals.seconds = elapsed();
  if (progress) progress(result.totals);
  return result;
}

}  // namespace mt
