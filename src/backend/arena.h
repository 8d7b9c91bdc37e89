// Owns Arena: one contiguous block of device memory with a bump allocator and a memory category.
// Setup code carves named views out of it; nothing is allocated in the step loop.
// A measuring arena (no backend) hands out null views and only counts bytes, so the exact
// capacity can be found by running the same setup code twice.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>

#include "backend/backend.h"
#include "base/memory.h"

namespace mt {

class Arena {
 public:
  static constexpr size_t kAlign = 64;

  // A measuring arena: allocations only advance the counter.
  explicit Arena(MemCategory category) : category_(category) {}
  // A real arena of `capacity` bytes on `backend`, reported to `tracker` (may be null).
  Arena(Backend& backend, MemCategory category, size_t capacity, MemoryTracker* tracker);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A view of `shape` elements of `dtype`, 64-byte aligned; throws when the arena is full.
  TensorView alloc(DType dtype, Shape shape);
  // Buffers never alive at the same time share memory: each alternative carves its views from
  // the same offset, and the arena then moves past the largest. Only that one's bytes count as
  // requested (and reach the tracker).
  void overlay(std::initializer_list<std::function<void()>> alternatives);
  // Zero every byte handed out so far.
  void zero_used();
  // Forget every allocation (the memory is reused by the next ones).
  void reset();

  bool measuring() const { return backend_ == nullptr; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  // Bytes requested by the views handed out (without alignment padding).
  size_t requested() const { return requested_; }
  MemCategory category() const { return category_; }

 private:
  Backend* backend_ = nullptr;
  MemCategory category_;
  MemoryTracker* tracker_ = nullptr;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t requested_ = 0;
};

}  // namespace mt
