// HostStaging: host copies of guard tensors for non-blocking calls (see comm/host_access.h).
#include "comm/host_access.h"

#include "backend/backend.h"

namespace mt {

TensorView HostStaging::host(const TensorView& t, bool read, bool write) {
  if (t.device != Device::guard || t.bytes() == 0) return t;
  Copy& c = copies_.emplace_back(Copy{t, std::vector<uint8_t>(t.bytes()), write});
  if (read) backend_for(t.device).copy_to_host(c.bytes.data(), t.data, t.bytes());
  return TensorView(c.bytes.data(), t.dtype, t.shape);
}

void HostStaging::finish() {
  for (Copy& c : copies_)
    if (c.write) backend_for(c.device.device).copy_from_host(c.device.data, c.bytes.data(), c.bytes.size());
  copies_.clear();
}

}  // namespace mt
