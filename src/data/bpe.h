// Owns BPE over token ids: the merge table (pair of ids -> rank and merged id), the merge loop of
// OpenAI's GPT-2 encoder (take the lowest-ranked adjacent pair, merge all its occurrences left to
// right, repeat; Hugging Face's queue of (rank, position) gives the same result) and a bounded cache
// of encoded words.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

class BpeMerges {
 public:
  struct Merge {
    int32_t left, right, merged;
    uint32_t rank;  // lower merges first
  };
  // `byte_ids[b]`: the symbol of byte b (for encode_word; unused by merge). A pair listed twice
  // keeps its last rank (Python's dict(zip(merges, range(len(merges))))).
  BpeMerges(const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges);

  // Appends the symbols of `word` after all merges (merge below). `scratch` is reused between calls.
  void encode_word(std::string_view word, std::vector<int32_t>& out, std::vector<int32_t>& scratch) const;
  // The same result in O(n log n) with a heap of candidate pairs, so a megabyte without spaces
  // (a DNA line, a base64 blob) does not take quadratic time. Public for the tests.
  void encode_long_word(std::string_view word, std::vector<int32_t>& out) const;
  static constexpr size_t k_short_word = 16;
  // Merges `symbols` (any ids, e.g. characters of a SentencePiece-style vocabulary) in place. Up to
  // k_short_word symbols rescan all pairs per merge (fast when short); more take the heap path of
  // encode_long_word.
  void merge(std::vector<int32_t>& symbols) const;

 private:
  struct Slot {
    uint64_t key;  // (left << 32) | right; k_empty when unused
    uint32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t k_empty = ~uint64_t{0};
  const Slot* find(int32_t left, int32_t right) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  std::array<int32_t, 256> byte_ids_;
  std::vector<Slot> slots_;  // open addressing, power-of-two size, at most half full
  uint64_t mask_ = 0;
};

// Word -> ids, for words already seen. Bounded: when full it starts again empty, so memory does
// not grow with the input. Not thread-safe; each thread keeps its own (tokenizer_gpt2.cpp).
class BpeCache {
 public:
  explicit BpeCache(size_t max_entries = 1 << 17);
  // Appends the cached ids of `word` to `out` and returns true, or returns false.
  bool lookup(std::string_view word, size_t hash, std::vector<int32_t>& out) const;
  void insert(std::string_view word, size_t hash, const int32_t* ids, size_t count);
  void clear();

 private:
  struct Entry {
    size_t hash;
    uint32_t key_offset, key_length, ids_offset, ids_length;
    bool used;
  };
  size_t max_entries_, size_ = 0;
  std::vector<Entry> entries_;  // open addressing, twice max_entries_
  std::string keys_;            // concatenated words
  std::vector<int32_t> ids_;    // concatenated ids
};

}  // namespace mt
