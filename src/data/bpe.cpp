// Owns the BPE merge table, the merge loop and the word cache (see bpe.h).
#include "data/bpe.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <limits>
#include <queue>

#include "base/error.h"

namespace mt {
namespace {
uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
uint64_t mix(uint64_t x) {  // splitmix64 finaliser: spreads the packed ids over the table
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

BpeMerges::BpeMerges(const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges)
    : byte_ids_(byte_ids) {
  const size_t size = std::bit_ceil(std::max<size_t>(16, merges.size() * 2));
  slots_.assign(size, Slot{k_empty, 0, 0});
  mask_ = size - 1;
  for (const Merge& m : merges) {
    const uint64_t key = pair_key(m.left, m.right);
    for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == k_empty || s.key == key) {
        s = Slot{key, m.rank, m.merged};
        break;
      }
    }
  }
}

const BpeMerges::Slot* BpeMerges::find(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s;
    if (s.key == k_empty) return nullptr;
  }
}

void BpeMerges::encode_word(std::string_view word, std::vector<int32_t>& out, std::vector<int32_t>& sym) const {
  sym.resize(word.size());
  for (size_t i = 0; i < word.size(); ++i) sym[i] = byte_ids_[static_cast<unsigned char>(word[i])];
  merge(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeMerges::encode_long_word(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) sym[i] = byte_ids_[static_cast<unsigned char>(word[i])];
  merge_long(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeMerges::merge(std::vector<int32_t>& sym) const {
  if (sym.size() > k_short_word) return merge_long(sym);
  size_t n = sym.size();
  while (n > 1) {
    uint32_t best_rank = std::numeric_limits<uint32_t>::max();
    const Slot* best = nullptr;
    for (size_t i = 0; i + 1 < n; ++i) {
      const Slot* s = find(sym[i], sym[i + 1]);
      if (s && (best == nullptr || s->rank < best_rank)) best = s, best_rank = s->rank;
    }
    if (best == nullptr) break;
    const auto left = static_cast<int32_t>(best->key >> 32);
    const auto right = static_cast<int32_t>(best->key & 0xFFFFFFFFu);
    size_t w = 0;
    for (size_t i = 0; i < n;) {
      if (i + 1 < n && sym[i] == left && sym[i + 1] == right) {
        sym[w++] = best->merged;
        i += 2;
      } else {
        sym[w++] = sym[i++];
      }
    }
    n = w;
  }
  sym.resize(n);
}

void BpeMerges::merge_long(std::vector<int32_t>& sym) const {
  // Symbols form a linked list over the initial positions; a merged symbol keeps its left
  // position, so positions stay in text order. The heap holds candidate pairs, checked when popped.
  const size_t n = sym.size();
  if (n == 0) return;
  std::vector<int64_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  }
  struct Candidate {
    uint32_t rank;
    int64_t pos;
    int32_t left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int64_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Slot* s = find(sym[pos], sym[next[pos]])) heap.push({s->rank, pos, sym[pos], sym[next[pos]]});
  };
  const auto valid = [&](const Candidate& c) {
    return sym[c.pos] == c.left && next[c.pos] >= 0 && sym[next[c.pos]] == c.right;
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
  std::vector<int64_t> merged_at;
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    if (!valid(top)) continue;
    // Python's loop merges every occurrence of this pair, left to right, before it looks at
    // the pairs those merges create: do the same with all its candidates (in position order).
    const Slot* merge = find(top.left, top.right);
    merged_at.clear();
    for (Candidate c = top;;) {
      if (valid(c)) {
        const int64_t right = next[c.pos];
        sym[c.pos] = merge->merged;
        sym[right] = -1;  // dead
        next[c.pos] = next[right];
        if (next[right] >= 0) prev[next[right]] = c.pos;
        merged_at.push_back(c.pos);
      }
      if (heap.empty() || heap.top().rank != top.rank) break;
      c = heap.top();
      heap.pop();
    }
    for (int64_t pos : merged_at) {
      if (sym[pos] < 0) continue;
      push(prev[pos]);
      push(pos);
    }
  }
  size_t w = 0;
  for (int64_t pos = 0; pos >= 0; pos = next[pos]) sym[w++] = sym[pos];
  sym.resize(w);
}

BpeCache::BpeCache(size_t max_entries) : max_entries_(std::bit_ceil(std::max<size_t>(max_entries, 16))) {
  entries_.assign(max_entries_ * 2, Entry{});
}

void BpeCache::clear() {
  std::fill(entries_.begin(), entries_.end(), Entry{});
  keys_.clear();
  ids_.clear();
  size_ = 0;
}

bool BpeCache::lookup(std::string_view word, size_t hash, std::vector<int32_t>& out) const {
  const size_t mask = entries_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Entry& e = entries_[i];
    if (!e.used) return false;
    if (e.hash == hash && e.key_length == word.size() &&
        std::string_view(keys_).substr(e.key_offset, e.key_length) == word) {
      out.insert(out.end(), ids_.begin() + e.ids_offset, ids_.begin() + e.ids_offset + e.ids_length);
      return true;
    }
  }
}

void BpeCache::insert(std::string_view word, size_t hash, const int32_t* ids, size_t count) {
  // Very long words are rare and would fill the arenas; they are not cached.
  if (word.size() > 256) return;
  if (size_ >= max_entries_ || keys_.size() + word.size() > std::numeric_limits<uint32_t>::max() / 2) clear();
  const size_t mask = entries_.size() - 1;
  size_t i = hash & mask;
  while (entries_[i].used) i = (i + 1) & mask;
  entries_[i] = Entry{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                      static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count), true};
  keys_.append(word);
  ids_.insert(ids_.end(), ids, ids + count);
  ++size_;
}

}  // namespace mt
