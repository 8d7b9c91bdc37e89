// Owns memory categories and the tracker that records current and peak bytes per category
// (DESIGN invariant 3: every byte accounted). Arenas report to it; the trainer prints it.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace mt {

enum class MemCategory { weights, grads, optimizer, activations, workspace, comm };
constexpr int kNumMemCategories = 6;
std::string_view mem_category_name(MemCategory category);

class MemoryTracker {
 public:
  void on_alloc(MemCategory category, size_t bytes);
  void on_free(MemCategory category, size_t bytes);

  size_t current(MemCategory category) const { return current_[static_cast<int>(category)]; }
  size_t peak(MemCategory category) const { return peak_[static_cast<int>(category)]; }
  size_t current_total() const;
  size_t peak_total() const { return peak_total_; }

  // "weights 1.23 MiB | grads ... | total peak ..." for logs.
  std::string report() const;

 private:
  std::array<size_t, kNumMemCategories> current_{};
  std::array<size_t, kNumMemCategories> peak_{};
  size_t peak_total_ = 0;
};

std::string format_bytes(size_t bytes);

}  // namespace mt
