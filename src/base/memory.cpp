#include "base/memory.h"

#include <cstdio>

#include "base/error.h"

namespace mt {

std::string_view mem_category_name(MemCategory category) {
  switch (category) {
    case MemCategory::weights: return "weights";
    case MemCategory::grads: return "grads";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::workspace: return "workspace";
    case MemCategory::comm: return "comm";
  }
  return "?";
}

void MemoryTracker::on_alloc(MemCategory category, size_t bytes) {
  const int c = static_cast<int>(category);
  current_[c] += bytes;
  if (current_[c] > peak_[c]) peak_[c] = current_[c];
  const size_t total = current_total();
  if (total > peak_total_) peak_total_ = total;
}

void MemoryTracker::on_free(MemCategory category, size_t bytes) {
  const int c = static_cast<int>(category);
  MT_CHECK(current_[c] >= bytes) << "freeing more " << mem_category_name(category) << " bytes than allocated";
  current_[c] -= bytes;
}

size_t MemoryTracker::current_total() const {
  size_t total = 0;
  for (size_t b : current_) total += b;
  return total;
}

std::string format_bytes(size_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

std::string MemoryTracker::report() const {
  std::string out;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (peak_[c] == 0) continue;
    out += std::string(mem_category_name(static_cast<MemCategory>(c))) + " " + format_bytes(peak_[c]) + " | ";
  }
  out += "total peak " + format_bytes(peak_total_);
  return out;
}

}  // namespace mt
