// Owns the activation ledger: what a transformer layer keeps between its forward and its backward,
// tensor by tensor, with the bytes each takes (from the buffers the stage carves, so the ledger
// is the memory itself, not a model of it). plan/ computes the same entries from formulas; tests
// hold the two equal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/layer.h"

namespace mt {

// One kept tensor: what it is, and its bytes (0 when the configuration keeps none).
struct LedgerEntry {
  std::string what;
  int64_t bytes = 0;
};

// The names of a layer's entries, in the order the ledger lists them.
const std::vector<std::string>& layer_ledger_names();
// One layer's kept tensors (its LayerActivations, whose `out` is the next layer's input).
std::vector<LedgerEntry> layer_ledger(const LayerActivations& act);
int64_t ledger_bytes(const std::vector<LedgerEntry>& ledger);

}  // namespace mt
