#include "plan/activation_memory.h"

#include "base/error.h"
#include "model/recompute.h"

namespace mt {

std::vector<LedgerEntry> layer_activation_formula(const ModelConfig& c, int64_t micro_batch, const StageRange& range,
                                                  int64_t layer) {
  const int64_t t = c.tensor_model_parallel_size, sp = c.sequence_parallel ? t : 1;
  const int64_t s = c.seq_length, b = micro_batch, h = c.hidden_size, d = c.kv_channels;
  const int64_t n = c.num_attention_heads / t, g = c.num_query_groups / t;  // this rank's heads and groups
  const int64_t a = static_cast<int64_t>(dtype_size(c.params_dtype));      // bytes per stored activation
  const int64_t N = s * b, Nl = N / sp;                                     // tokens; this rank's under SP
  const int64_t norm_stats = (c.normalization == Normalization::layernorm ? 2 : 1) * 4 * Nl;
  const bool unfused = c.attention_impl == AttentionImpl::unfused;
  const bool fc1_kept = !(c.recompute_granularity == RecomputeGranularity::selective && c.recompute_mlp);
  const std::vector<int64_t> bytes = {
      norm_stats,
      a * N * n * d,
      a * N * g * d,
      a * N * g * d,
      unfused ? 4 * b * n * s * s : 0,
      unfused && c.attention_dropout > 0 ? b * n * s * s : 0,
      unfused ? 0 : 4 * b * n * s,
      a * N * n * d,
      Nl * h,
      a * Nl * h,
      norm_stats,
      fc1_kept ? a * N * c.fc1_size() / t : 0,
      Nl * h,
      a * Nl * h,
  };
  const std::vector<std::string>& names = layer_ledger_names();
  MT_CHECK(names.size() == bytes.size()) << "the activation formula and the ledger list different entries";
  std::vector<LedgerEntry> ledger;
  const RecomputePlan recompute(c, range);
  const bool full = recompute.group_first(layer) >= 0, group_last = full && recompute.group_last(layer);
  for (size_t i = 0; i < names.size(); ++i) {
    const bool kept = !full || (group_last && names[i] == "layer output");
    ledger.push_back({names[i], kept ? bytes[i] : 0});
  }
  return ledger;
}

}  // namespace mt
