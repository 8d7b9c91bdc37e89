#include "backend/arena.h"

#include <algorithm>

namespace mt {

Arena::Arena(Backend& backend, MemCategory category, size_t capacity, MemoryTracker* tracker)
    : backend_(&backend), category_(category), tracker_(tracker), capacity_(capacity) {
  if (capacity_ > 0) base_ = static_cast<char*>(backend_->allocate(capacity_));
}

Arena::~Arena() {
  if (tracker_ && requested_ > 0) tracker_->on_free(category_, requested_);
  if (base_) backend_->deallocate(base_);
}

TensorView Arena::alloc(DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const size_t offset = used_;
  const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (!measuring()) {
    MT_CHECK(offset + padded <= capacity_)
        << mem_category_name(category_) << " arena full: need " << format_bytes(offset + padded) << ", capacity "
        << format_bytes(capacity_);
  }
  used_ += padded;
  requested_ += bytes;
  if (tracker_) tracker_->on_alloc(category_, bytes);
  const Device device = backend_ ? backend_->device() : Device::cpu;
  return TensorView(measuring() ? nullptr : base_ + offset, dtype, shape, device);
}

void Arena::overlay(std::initializer_list<std::function<void()>> alternatives) {
  const size_t start = used_, requested_start = requested_;
  size_t end = start, requested_end = requested_start;
  MemoryTracker* const tracker = tracker_;
  tracker_ = nullptr;  // the union is reported once, below
  try {
    for (const auto& carve : alternatives) {
      used_ = start;
      requested_ = requested_start;
      carve();
      end = std::max(end, used_);
      requested_end = std::max(requested_end, requested_);
    }
  } catch (...) {  // forget the failed alternatives, which the tracker never saw
    tracker_ = tracker;
    used_ = start;
    requested_ = requested_start;
    throw;
  }
  tracker_ = tracker;
  used_ = end;
  requested_ = requested_end;
  if (tracker_) tracker_->on_alloc(category_, requested_end - requested_start);
}

void Arena::zero_used() {
  if (!measuring() && used_ > 0) backend_->memset_zero(base_, used_);
}

void Arena::reset() {
  if (tracker_ && requested_ > 0) tracker_->on_free(category_, requested_);
  used_ = 0;
  requested_ = 0;
}

}  // namespace mt
