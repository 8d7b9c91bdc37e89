#include "plan/activation_memory.h"

#include "base/error.h"
#include "model/recompute.h"

namespace mt {

namespace {

// What one layer's forward keeps when nothing of it is recomputed in full, in ledger order.
std::vector<int64_t> layer_bytes(const ModelConfig& c, int64_t micro_batch) {
  const int64_t t = c.tensor_model_parallel_size, sp = c.sequence_parallel ? t : 1;
  const int64_t s = c.seq_length, b = micro_batch, h = c.hidden_size, d = c.kv_channels;
  const int64_t n = c.num_attention_heads / t, g = c.num_query_groups / t;  // this rank's heads and groups
  const int64_t a = static_cast<int64_t>(dtype_size(c.params_dtype));      // bytes per stored activation
  const int64_t N = s * b, Nl = N / sp;                                     // tokens; this rank's under SP
  const int64_t norm_stats = (c.normalization == Normalization::layernorm ? 2 : 1) * 4 * Nl;
  const bool unfused = c.attention_impl == AttentionImpl::unfused;
  const int64_t drop_mask = c.hidden_dropout > 0.0f ? Nl * h : 0;  // none without dropout
  const bool fc1_kept = !(c.recompute_granularity == RecomputeGranularity::selective && c.recompute_mlp);
  return {
      norm_stats,
      a * N * n * d,
      a * N * g * d,
      a * N * g * d,
      unfused ? 4 * b * n * s * s : 0,
      unfused && c.attention_dropout > 0 ? b * n * s * s : 0,
      unfused ? 0 : 4 * b * n * s,
      a * N * n * d,
      drop_mask,
      a * Nl * h,
      norm_stats,
      fc1_kept ? a * N * c.fc1_size() / t : 0,
      drop_mask,
      a * Nl * h,
  };
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t total = 0;
  for (const int64_t x : v) total += x;
  return total;
}

}  // namespace

std::vector<LedgerEntry> layer_activation_formula(const ModelConfig& c, int64_t micro_batch, const StageRange& range,
                                                  int64_t layer) {
  const std::vector<int64_t> bytes = layer_bytes(c, micro_batch);
  const std::vector<std::string>& names = layer_ledger_names();
  MT_CHECK(names.size() == bytes.size()) << "the activation formula and the ledger list different entries";
  const RecomputePlan recompute(c, range);
  const bool full = recompute.group_first(layer) >= 0, group_last = full && recompute.group_last(layer);
  std::vector<LedgerEntry> ledger;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool kept = !full || (group_last && names[i] == "layer output");
    ledger.push_back({names[i], kept ? bytes[i] : 0});
  }
  return ledger;
}

int64_t stage_activation_formula(const ModelConfig& c, int64_t micro_batch, const StageRange& range, int64_t slots) {
  if (slots == 0) return 0;
  const int64_t sp = c.sequence_parallel ? c.tensor_model_parallel_size : 1;
  const int64_t a = static_cast<int64_t>(dtype_size(c.params_dtype));
  const int64_t N = c.seq_length * micro_batch, Nl = N / sp, h = c.hidden_size;
  const int64_t hidden = a * Nl * h;  // one [Nl, h] activation
  const int64_t layer = sum(layer_bytes(c, micro_batch));
  const RecomputePlan recompute(c, range);
  // A stage without the head sends its last output on and never reads it again: one buffer.
  const bool shared_output = !range.head && range.num_layers() > 0;
  int64_t per_slot = hidden;  // the stage's input
  if (range.embedding && c.hidden_dropout > 0.0f) per_slot += Nl * h;  // the embedding's dropout mask
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    const bool sent = shared_output && i + 1 == range.last_layer;
    if (recompute.group_first(i) < 0)
      per_slot += layer - (sent ? hidden : 0);
    else if (recompute.group_last(i) && !sent)
      per_slot += hidden;
  }
  if (range.head)  // the final norm's statistics and the output layer's input gradient (f32)
    per_slot += (c.normalization == Normalization::layernorm ? 2 : 1) * 4 * Nl + 4 * Nl * h;
  // Full recomputation: one pool of a group's activations (its inner outputs included) for all slots.
  const int64_t group = recompute.largest_group();
  const int64_t pool = group > 0 ? group * layer - hidden : 0;
  return slots * per_slot + pool + (shared_output ? hidden : 0) + (range.head ? 4 * N : 0);
}

}  // namespace mt
