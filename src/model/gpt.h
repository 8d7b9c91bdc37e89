// Owns GptModel (Megatron's GPTModel): embedding -> L transformer layers -> final norm -> output
// layer -> cross entropy, as an explicit forward/backward pair over preallocated buffers.
// Parameters and gradients live in a ParamStore; saved activations in one arena, backward
// temporaries in another, so peak memory by category is known before the first step.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/transformer_layer.h"
#include "model/params.h"

namespace mt {

class GptModel {
 public:
  // micro_batch and config.seq_length fix every activation shape.
  GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
           int threads = 0);

  // tokens, labels: host i32 [b, s]; loss_mask: host f32 [b, s] or empty (all tokens count).
  // Returns Σ mask·loss / Σ mask (Megatron's per-micro-batch lm loss). Keeps what backward needs.
  // dropout_round selects fresh dropout masks (the trainer passes a counter of micro-batches).
  double forward(const TensorView& tokens, const TensorView& labels, const TensorView& loss_mask,
                 uint64_t dropout_round = 0);
  // Accumulates d(loss_scale · loss)/dθ into the gradients of params(). Call after forward.
  void backward(float loss_scale = 1.0f);

  ParamStore& params() { return *params_; }
  const ModelConfig& config() const { return config_; }
  int64_t micro_batch() const { return b_; }
  // Logits [s, b, V_padded] of the last forward (overwritten by backward).
  TensorView logits() const { return logits_.reshape({s_, b_, config_.padded_vocab_size()}); }
  // Per-token losses [s, b] of the last forward.
  TensorView token_losses() const { return losses_.reshape({s_, b_}); }
  // Bytes of saved activations and of backward scratch (exact, as carved from the arenas).
  size_t activation_bytes() const { return activations_->requested(); }
  size_t workspace_bytes() const { return workspace_->requested(); }
  void set_seed(uint64_t seed) { seed_ = seed; }

 private:
  void carve(Arena& activations, Arena& workspace, int threads);
  LayerContext layer_context(int64_t layer) const;

  ModelConfig config_;
  int64_t s_ = 0, b_ = 0;
  Backend& backend_;
  uint64_t seed_ = 1234;
  uint64_t round_ = 0;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Arena> activations_;
  std::unique_ptr<Arena> workspace_;

  // Inputs copied to the device.
  TensorView tokens_;      // i32 [b, s]
  TensorView labels_;      // i32 [N] in [s, b] row order
  std::vector<float> token_weights_;  // host [N]: mask / Σ mask, row order [s, b]
  // Saved activations.
  TensorView emb_drop_mask_;  // u8 [N, h]
  TensorView x0_;             // [N, h] embedding output after dropout (layer 0 input)
  std::vector<LayerActivations> layers_;
  TensorView final_out_, final_mean_, final_rstd_;  // [N, h], [N], [N]
  TensorView logits_;         // [N, V]; backward turns it into dlogits in place
  TensorView losses_, lse_;   // [N]
  // Scratch.
  LayerScratch scratch_;
  TensorView dx_;             // [N, h] running residual gradient
  TensorView dlosses_;        // [N]
  TensorView rope_cos_, rope_sin_;  // [max_pos, d/2] (RoPE only)
};

}  // namespace mt
