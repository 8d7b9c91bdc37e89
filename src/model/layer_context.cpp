#include "model/layer_context.h"

#include <string>

#include "ops/elementwise.h"

namespace mt {

void LayerContext::round(const TensorView& t) const { round_to_dtype(t, act_dtype); }

RngStream dropout_stream(uint64_t seed, int64_t layer, const char* site) {
  // One 64-bit stream id per (site, layer), splitmix-mixed; the sample is in the element index.
  uint64_t z = stream_id(std::string(site) + "." + std::to_string(layer));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return RngStream{seed, z ^ (z >> 31)};
}

}  // namespace mt
