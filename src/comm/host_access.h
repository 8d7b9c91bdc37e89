// Owns how the host-memory communicators (size-1, MPI, the loopback) reach guard tensors
// (backend/guard.h): guard memory is host memory that stays unreadable outside backend calls, and
// a collective is such a call (DESIGN invariant 4). A blocking call opens a GuardWindow for its
// span; a non-blocking one works on host copies instead, because a window left open until wait()
// would let the caller's own host accesses in between go unnoticed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "backend/guard.h"

namespace mt {

// Memory these communicators can address: the host's, and guard memory inside a window.
inline bool host_addressable(const TensorView& t) { return t.device == Device::cpu || t.device == Device::guard; }

// Opens a GuardWindow while it lives when any of the tensors is guard memory; nothing otherwise.
class HostAccess {
 public:
  HostAccess(std::initializer_list<TensorView> tensors) {
    for (const TensorView& t : tensors)
      if (t.device == Device::guard) {
        window_.emplace();
        return;
      }
  }

 private:
  std::optional<GuardWindow> window_;
};

// Host copies of a non-blocking call's guard tensors, kept until it completes.
class HostStaging {
 public:
  // What the call should read and write for t: t itself in host memory; for a guard tensor a host
  // copy, loaded with t's bytes when the call reads it, and copied back by finish() when it writes it.
  TensorView host(const TensorView& t, bool read, bool write);
  // Copies the written copies back to their tensors (after the call completed; once).
  void finish();

 private:
  struct Copy {
    TensorView device;
    std::vector<uint8_t> bytes;  // its data pointer stays put when the list grows
    bool write;
  };
  std::vector<Copy> copies_;
};

}  // namespace mt
