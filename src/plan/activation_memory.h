// Owns the activation-memory formulas: the bytes one transformer layer keeps between its forward
// and its backward on one rank, entry by entry as model/activation_ledger names them, from the
// configuration alone (no buffers, no devices). Korthikanti et al. (2205.05198) count
// s·b·h·(34 + 5·a·s/h) bytes per layer with 16-bit activations and 1-byte dropout masks; this
// code keeps less: the norm outputs and the MLP activation's output are remade in the backward
// (from 4 bytes of norm statistics per token and norm, and from fc1's output), and the dropped
// attention probabilities are remade from the f32 probabilities and their mask (4 + 1 bytes, as
// the paper's 2 + 1 + 2). docs/performance.md sets the two side by side.
#pragma once

#include <cstdint>
#include <vector>

#include "model/activation_ledger.h"
#include "model/config.h"

namespace mt {

// Layer `layer` of the stage `range` of c (the whole model, finalized, with its tensor-parallel
// size, sequence parallelism, recompute settings, activation dtype (params_dtype), attention
// backend and dropout); micro_batch: b. A layer under full recomputation keeps its output alone
// when it ends its recompute group (the next group's input), else nothing; the rest of its
// activations live in one pool per stage, which all micro-batches share.
std::vector<LedgerEntry> layer_activation_formula(const ModelConfig& c, int64_t micro_batch, const StageRange& range,
                                                  int64_t layer);

// All a stage keeps for `slots` micro-batches in flight (its activation arena): per slot its
// input, the embedding's dropout mask, its layers (above) and the head's norm statistics and
// input gradient; once, the full-recomputation pool, the output buffer a stage without the head
// shares between slots, and the head's per-token losses.
int64_t stage_activation_formula(const ModelConfig& c, int64_t micro_batch, const StageRange& range, int64_t slots);

}  // namespace mt
