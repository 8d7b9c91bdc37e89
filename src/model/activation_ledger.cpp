#include "model/activation_ledger.h"

namespace mt {

const std::vector<std::string>& layer_ledger_names() {
  static const std::vector<std::string> names = {
      "input norm statistics",       // mean (LayerNorm) and rstd, f32 per token: the norm output is remade
      "attention query",             // after RoPE
      "attention key",               // after RoPE
      "attention value",
      "query and key norm inputs",      // --qk-layernorm: q and k before their norms
      "query and key norm statistics",  // f32 per head and token
      "attention probabilities",     // unfused attention: softmax output, f32
      "attention probability mask",  // unfused attention with dropout: the dropped output is remade
      "attention log-sum-exp",       // flash attention: f32 per query and head
      "attention context",           // input of the output projection
      "attention dropout mask",
      "residual after attention",    // input of the MLP's norm
      "mlp norm statistics",
      "mlp fc1 output",              // the activation's input: its output is remade
      "moe router logits",           // f32
      "moe routing",                 // weights and choices per token, the routing map, counts; the dispatch's weights and row order
      "moe permuted tokens",         // the experts' input rows (f32, as the dispatcher receives them)
      "moe expert fc1 output",       // the experts' activation input: its output is remade
      "moe expert output",           // the rows the combine weighed (f32, for the routing weights' gradient)
      "shared expert fc1 output",
      "mlp dropout mask",
      "layer output",                // the next layer's input
  };
  return names;
}

std::vector<LedgerEntry> layer_ledger(const LayerActivations& act) {
  const MoeSaved& m = act.moe;
  const std::vector<std::vector<const TensorView*>> tensors = {
      {&act.norm1.mean, &act.norm1.rstd},
      {&act.attention.q},
      {&act.attention.k},
      {&act.attention.v},
      {&act.attention.q_pre, &act.attention.k_pre},
      {&act.attention.q_norm.mean, &act.attention.q_norm.rstd, &act.attention.k_norm.mean, &act.attention.k_norm.rstd},
      {&act.attention.probs},
      {&act.attention.probs_mask},
      {&act.attention.lse},
      {&act.attention.context},
      {&act.attn_drop_mask},
      {&act.residual1},
      {&act.norm2.mean, &act.norm2.rstd},
      {&act.mlp.fc1_out},
      {&m.logits},
      {&m.probs, &m.indices, &m.routing_probs, &m.routing_map, &m.aux_counts, m.dispatch ? &m.dispatch->probs : nullptr,
       m.dispatch ? &m.dispatch->row_token : nullptr, m.dispatch ? &m.dispatch->permuted_counts : nullptr},
      {m.dispatch ? &m.dispatch->rows : nullptr},
      {&m.pre_act},
      {m.dispatch ? &m.dispatch->combined : nullptr},
      {&m.shared.fc1_out},
      {&act.mlp_drop_mask},
      {&act.out},
  };
  std::vector<LedgerEntry> ledger;
  const std::vector<std::string>& names = layer_ledger_names();
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t bytes = 0;
    for (const TensorView* t : tensors[i])
      if (t && t->ndim() > 0) bytes += static_cast<int64_t>(t->bytes());
    ledger.push_back({names[i], bytes});
  }
  return ledger;
}

int64_t ledger_bytes(const std::vector<LedgerEntry>& ledger) {
  int64_t total = 0;
  for (const LedgerEntry& e : ledger) total += e.bytes;
  return total;
}

}  // namespace mt
