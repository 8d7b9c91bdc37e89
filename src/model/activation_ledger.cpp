#include "model/activation_ledger.h"

namespace mt {

const std::vector<std::string>& layer_ledger_names() {
  static const std::vector<std::string> names = {
      "input norm statistics",       // mean (LayerNorm) and rstd, f32 per token: the norm output is remade
      "attention query",             // after RoPE
      "attention key",               // after RoPE
      "attention value",
      "attention probabilities",     // unfused attention: softmax output, f32
      "attention probability mask",  // unfused attention with dropout: the dropped output is remade
      "attention log-sum-exp",       // flash attention: f32 per query and head
      "attention context",           // input of the output projection
      "attention dropout mask",
      "residual after attention",    // input of the MLP's norm
      "mlp norm statistics",
      "mlp fc1 output",              // the activation's input: its output is remade
      "mlp dropout mask",
      "layer output",                // the next layer's input
  };
  return names;
}

std::vector<LedgerEntry> layer_ledger(const LayerActivations& act) {
  const TensorView* tensors[][2] = {
      {&act.norm1.mean, &act.norm1.rstd},
      {&act.attention.q, nullptr},
      {&act.attention.k, nullptr},
      {&act.attention.v, nullptr},
      {&act.attention.probs, nullptr},
      {&act.attention.probs_mask, nullptr},
      {&act.attention.lse, nullptr},
      {&act.attention.context, nullptr},
      {&act.attn_drop_mask, nullptr},
      {&act.residual1, nullptr},
      {&act.norm2.mean, &act.norm2.rstd},
      {&act.mlp.fc1_out, nullptr},
      {&act.mlp_drop_mask, nullptr},
      {&act.out, nullptr},
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
