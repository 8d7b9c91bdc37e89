// Prints tokenizer encode throughput (MB/s of UTF-8 input) on a text file, one document per line,
// for 1 thread and for 2 threads sharing one tokenizer. Each run builds a fresh tokenizer, so word
// caches start cold as in a preprocess run. Medians of --runs runs. Tokenizer flags as Megatron's
// (GPT2BPETokenizer when only --vocab-file and --merge-file are given):
//   tokenizer_throughput --vocab-file encoder.json --merge-file vocab.bpe --input corpus.txt [--runs 3]
//   tokenizer_throughput --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR --input corpus.txt
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "data/tokenizer.h"
#include "median.h"

namespace {

double encode_lines(const mt::Tokenizer& tok, const std::vector<std::string_view>& lines, size_t begin,
                    size_t step, size_t& tokens) {
  std::vector<int32_t> ids;
  for (size_t i = begin; i < lines.size(); i += step) {
    ids.clear();
    tok.encode_into(lines[i], ids);
    tokens += ids.size();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  mt::TokenizerOptions options;
  options.type = "GPT2BPETokenizer";
  std::string input;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tokenizer-type") options.type = argv[i + 1];
    else if (flag == "--tokenizer-model") options.model = argv[i + 1];
    else if (flag == "--vocab-file") options.vocab_file = argv[i + 1];
    else if (flag == "--merge-file") options.merge_file = argv[i + 1];
    else if (flag == "--input") input = argv[i + 1];
    else if (flag == "--runs") runs = std::atoi(argv[i + 1]);
  }
  if (input.empty()) {
    std::fprintf(stderr, "usage: %s [--tokenizer-type T] [--tokenizer-model M | --vocab-file F --merge-file F] --input TEXT [--runs N]\n", argv[0]);
    return 2;
  }
  std::ifstream in(input, std::ios::binary);
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.emplace_back(text.data() + pos, end - pos);
    pos = end;
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("input %s: %.1f MB, %zu lines\n", input.c_str(), mb, lines.size());
  for (int threads : {1, 2}) {
    std::vector<double> rates;
    size_t tokens = 0;
    for (int r = 0; r < runs; ++r) {
      const auto tokenizer = mt::make_tokenizer(options);
      const mt::Tokenizer& tok = *tokenizer;
      std::vector<size_t> counts(static_cast<size_t>(threads), 0);
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] { encode_lines(tok, lines, static_cast<size_t>(t), static_cast<size_t>(threads), counts[static_cast<size_t>(t)]); });
      for (auto& th : pool) th.join();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(mb / s);
      tokens = 0;
      for (size_t c : counts) tokens += c;
    }
    const double rate = median(rates);
    std::printf("threads %d: median %.1f MB/s (%.1f MB/s per thread), %zu tokens, %.2f bytes/token\n", threads,
                rate, rate / threads, tokens,
                static_cast<double>(text.size()) / static_cast<double>(tokens));
  }
  return 0;
}
