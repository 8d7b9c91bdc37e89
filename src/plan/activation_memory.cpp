#include "plan/activation_memory.h"

#include <algorithm>

#include "base/error.h"
#include "model/blocks/moe.h"
#include "model/recompute.h"
#include "ops/moe_router.h"

namespace mt {

namespace {

// What one layer's forward keeps when nothing of it is recomputed in full, in ledger order, for
// MLP blocks of `kinds` (a full-recomputation pool entry may serve both).
std::vector<int64_t> layer_bytes(const ModelConfig& c, int64_t micro_batch, MlpKinds kinds) {
  const int64_t t = c.tensor_model_parallel_size, sp = c.sequence_parallel ? t : 1;
  const int64_t s = c.local_seq_length(), b = micro_batch, h = c.hidden_size, d = c.kv_channels;
  const int64_t n = c.num_attention_heads / t, g = c.num_query_groups / t;  // this rank's heads and groups
  const int64_t a = static_cast<int64_t>(dtype_size(c.params_dtype));      // bytes per stored activation
  const int64_t N = s * b, Nl = N / sp;                                     // tokens; this rank's under SP
  const int64_t stats_per_row = (c.normalization == Normalization::layernorm ? 2 : 1) * 4;
  const int64_t norm_stats = stats_per_row * Nl;
  const int64_t qk_heads = c.qk_layernorm ? n + g : 0;  // heads whose rows --qk-layernorm normalises
  const bool unfused = c.attention_impl == AttentionImpl::unfused;
  const int64_t drop_mask = c.hidden_dropout > 0.0f ? Nl * h : 0;  // none without dropout
  const bool selective = c.recompute_granularity == RecomputeGranularity::selective;
  const bool fc1_kept = !(selective && c.recompute_mlp);  // dense layers
  const bool shared_fc1_kept = !(selective && c.recompute_shared_experts);
  const bool moe_kept = kinds.moe && !c.recompute_moe;  // --recompute-modules moe keeps nothing of the block
  // MoE: the router's outputs per token, and the dispatcher's rows at their worst case
  // (parallel/expert_dispatch.h): R rows reach this rank's experts; the combine keeps P rows and the
  // weights of W tokens (alltoall over several ranks: this rank's own L rows and tokens; otherwise
  // the experts' rows and the G·Nl tokens an allgather collects).
  const MoeConfig& m = c.moe;
  const int64_t E = m.num_experts, k = m.router.topk, G = m.expert_model_parallel_size * m.expert_tensor_parallel_size;
  const int64_t R = kinds.moe ? moe_max_rows(c, Nl, moe_group_sizes(c)) : 0;
  int64_t L = Nl * k;  // a rank's own routed rows
  if (m.capacity.capacity_factor) {
    const int64_t capacity = std::min(moe_expert_capacity(Nl, E, k, *m.capacity.capacity_factor), Nl);
    L = m.capacity.pad_to_capacity ? E * capacity : std::min(L, E * capacity);
  }
  const bool exchange = m.dispatcher == MoeDispatcher::alltoall && G > 1;
  const int64_t P = exchange ? L : R, W = exchange ? Nl : G * Nl;
  const int64_t routing = Nl * k * (4 + 4) + Nl * E * (4 + 1) + (m.aux_loss() ? 4 * moe_aux_count_rows(c, b) * E : 0) +
                          4 * W * E + 4 * P + 4 * E;
  const int64_t shared_fc1 = (c.activation == Activation::swiglu ? 2 : 1) * m.shared_expert_intermediate_size / t;
  return {
      norm_stats,
      a * N * n * d,
      a * N * g * d,
      a * N * g * d,
      a * N * qk_heads * d,
      stats_per_row * N * qk_heads,
      unfused ? 4 * b * n * s * s : 0,
      unfused && c.attention_dropout > 0 ? b * n * s * s : 0,
      unfused ? 0 : 4 * b * n * s,
      a * N * n * d,
      drop_mask,
      a * Nl * h,
      norm_stats,
      kinds.dense && fc1_kept ? a * N * c.fc1_size() / t : 0,
      moe_kept ? 4 * Nl * E : 0,
      moe_kept ? routing : 0,
      moe_kept ? 4 * R * h : 0,
      moe_kept ? a * R * c.moe_fc1_size() / m.expert_tensor_parallel_size : 0,
      moe_kept ? 4 * P * h : 0,
      moe_kept && shared_fc1_kept ? a * N * shared_fc1 : 0,
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
  const std::vector<int64_t> bytes = layer_bytes(c, micro_batch, c.mlp_kinds(layer, layer + 1));
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
  const int64_t N = c.local_seq_length() * micro_batch, Nl = N / sp, h = c.hidden_size;
  const int64_t hidden = a * Nl * h;  // one [Nl, h] activation
  auto layer_total = [&](MlpKinds kinds) { return sum(layer_bytes(c, micro_batch, kinds)); };
  const RecomputePlan recompute(c, range);
  // A stage without the head sends its last output on and never reads it again: one buffer.
  const bool shared_output = !range.head && range.num_layers() > 0;
  int64_t per_slot = hidden;  // the stage's input
  if (range.embedding && c.hidden_dropout > 0.0f) per_slot += Nl * h;  // the embedding's dropout mask
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    const bool sent = shared_output && i + 1 == range.last_layer;
    if (recompute.group_first(i) < 0)
      per_slot += layer_total(c.mlp_kinds(i, i + 1)) - (sent ? hidden : 0);
    else if (recompute.group_last(i) && !sent)
      per_slot += hidden;
  }
  if (range.head)  // the final norm's statistics and the output layer's input gradient (f32)
    per_slot += (c.normalization == Normalization::layernorm ? 2 : 1) * 4 * Nl + 4 * Nl * h;
  // Full recomputation: one pool of a group's activations (its inner outputs included) for all slots.
  int64_t pool = 0;
  for (const MlpKinds kinds : recompute.pool_kinds(c)) pool += layer_total(kinds);
  if (pool > 0) pool -= hidden;  // the pool's last entry keeps no output
  return slots * per_slot + pool + (shared_output ? hidden : 0) + (range.head ? 4 * N : 0);
}

}  // namespace mt
