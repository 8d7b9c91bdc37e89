#include "model/layer_context.h"

#include <string>

#include "ops/elementwise.h"

namespace mt {

void LayerContext::round(const TensorView& t) const { round_to_dtype(t, act_dtype); }

RngStream dropout_stream(uint64_t seed, uint64_t round, int64_t layer, const char* site) {
  // Mix (site, layer, round) into one 64-bit stream id; splitmix-style so nearby rounds differ widely.
  uint64_t z = stream_id(std::string(site) + "." + std::to_string(layer)) + round * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return RngStream{seed, z ^ (z >> 31)};
}

}  // namespace mt
