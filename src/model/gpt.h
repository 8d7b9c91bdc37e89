// Owns GptModel (Megatron's GPTModel): embedding -> L transformer layers -> final norm -> output
// layer -> cross entropy, as an explicit forward/backward pair over preallocated buffers.
// Parameters and gradients live in a ParamStore; saved activations in one arena, backward
// temporaries in another, so peak memory by category is known before the first step.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/transformer_layer.h"
#include "model/params.h"
#include "parallel/layers.h"

namespace mt {

// One micro-batch in host memory.
struct MicroBatch {
  TensorView tokens;     // i32 [b, s]
  TensorView labels;     // i32 [b, s]
  TensorView loss_mask;  // f32 [b, s], or empty: every token counts
  // i32 [b, s]: the position of each token (--reset-position-ids: restarting at 0 after each EOD),
  // looked up by the learned position embedding or rotated by RoPE; each in
  // [0, --max-position-embeddings). Empty: position = sequence index.
  TensorView position_ids = {};
  // i32 [b, s]: where each token's document starts (--reset-attention-mask): token i attends to
  // tokens document_start[j, i] .. i of its sequence j, 0 <= document_start[j, i] <= i.
  // Empty: plain causal attention over the whole sequence.
  TensorView document_start = {};
};

// What the loss reduction needs: Megatron's lm loss is loss_sum / num_tokens.
struct LossSums {
  double loss_sum = 0.0;    // Σ mask · token loss
  double num_tokens = 0.0;  // Σ mask
};

struct ForwardOptions {
  uint64_t dropout_round = 0;  // selects the dropout masks (the trainer counts micro-batches)
  bool dropout = true;         // false for evaluation
  // 0: no backward follows (evaluation). Otherwise backward() will accumulate
  // grad_scale · d(loss_sum)/dθ; the output layer's share is computed during the forward, chunk by
  // chunk, so the [s·b, V] logits never exist in full.
  float grad_scale = 0.0f;
};

struct GptModelOptions {
  int threads = 0;                 // OpenMP threads the workspaces are sized for; 0 = all
  int64_t head_chunk_tokens = 512; // rows of logits alive at once in the output layer
  // The tensor-parallel group (size config.tensor_model_parallel_size); its sequence_parallel
  // flag is taken from the config. Every rank of the group runs the same micro-batch.
  Communicator* tp_comm = nullptr;
};

class GptModel {
 public:
  // micro_batch and config.seq_length fix every activation shape.
  GptModel(const ModelConfig& config, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
           const GptModelOptions& options = {});

  // Runs the model on one micro-batch and keeps what backward needs.
  LossSums forward(const MicroBatch& batch, const ForwardOptions& options);
  // Accumulates grad_scale · d(loss_sum)/dθ into the gradients of params(). Call after a forward
  // with grad_scale != 0.
  void backward();

  ParamStore& params() { return *params_; }
  const ModelConfig& config() const { return config_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  int64_t micro_batch() const { return b_; }
  // Logits [rows, V_padded / t] of the last chunk of the last forward (all s·b rows, in [s, b] order,
  // when head_chunk_tokens >= s·b and grad_scale was 0); valid until the next forward() or
  // backward(), since it shares memory with the layers' scratch. For tests.
  TensorView last_logits_chunk() const { return logits_chunk_; }
  // Bytes of saved activations (exact, as carved from the arena).
  size_t activation_bytes() const { return activations_->requested(); }
  void set_seed(uint64_t seed) { seed_ = seed; }

 private:
  void carve(Arena& activations, Arena& workspace, int threads);
  LayerContext layer_context(int64_t layer) const;
  // The position ids of this micro-batch, or empty (position = sequence index).
  TensorView positions() const { return has_positions_ ? positions_ : TensorView(); }
  bool mixed() const { return config_.params_dtype != DType::f32; }
  // Layer i's forward from its f32 input; stores its activations and returns its f32 output
  // (with_output = false: a rerun before the backward that stops short of fc2 and returns an empty
  // view, see transformer_layer_fwd).
  TensorView layer_fwd(const GptTensors& w, int64_t i, const TensorView& x, bool with_output = true);
  // f32 views of layer i's weights: the parameters themselves, or (16-bit) a staged copy.
  LayerTensors layer_weights_f32(const GptTensors& w, int64_t i);
  // f32 views of layer i's saved activations: the tensors themselves, or (16-bit) staging views
  // filled from them when `load` is set.
  LayerActivations layer_activations_f32(int64_t i, bool load);
  // f32 view of a tensor: itself, or `staging` filled from it.
  TensorView as_f32(const TensorView& t, const TensorView& staging);
  // Final norm output -> logits -> cross entropy, in chunks of rows; when training also the
  // gradients of the output weight and of the final norm output (into dfinal_).
  void output_head_fwd(float grad_scale);
  // The word-embedding / output-layer rows this tensor-parallel rank holds.
  VocabShard vocab_shard() const;

  ModelConfig config_;
  ModelConfig local_;  // what one tensor-parallel rank computes (config_.tp_local())
  TensorParallel tp_;
  int64_t s_ = 0, b_ = 0;
  int64_t local_rows_ = 0;  // Nl: residual-stream rows on this rank (N/t under sequence parallelism)
  Backend& backend_;
  uint64_t seed_ = 1234;
  uint64_t round_ = 0;
  bool dropout_ = true;
  float grad_scale_ = 0.0f;
  int64_t head_chunk_ = 0;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Arena> activations_;
  std::unique_ptr<Arena> workspace_;

  // Inputs copied to the device.
  TensorView tokens_;      // i32 [b, s]
  TensorView positions_;   // i32 [b, s] the micro-batch's position ids (used when has_positions_)
  TensorView doc_start_;   // i32 [b, s] the micro-batch's document starts (used when has_doc_start_)
  bool has_positions_ = false, has_doc_start_ = false;
  TensorView labels_;      // i32 [N] in [s, b] row order
  // Host staging of the [N] per-token vectors, in row order [s, b] (sized once).
  std::vector<float> mask_sb_, host_dlosses_, host_losses_;
  std::vector<int32_t> host_labels_;
  // Saved activations (Nl rows: the residual stream; see transformer_layer.h).
  TensorView emb_drop_mask_;  // u8 [Nl, h]
  TensorView x0_;             // [Nl, h] embedding output after dropout (layer 0 input)
  std::vector<LayerActivations> layers_;
  TensorView final_mean_, final_rstd_;  // [Nl]
  TensorView dfinal_;         // [Nl, h] gradient of the final norm output, from the forward
  TensorView losses_;         // [N]
  // Scratch.
  LayerScratch scratch_;
  TensorView final_out_;      // [Nl, h] final norm output (consumed inside the forward)
  TensorView logits_chunk_;   // [chunk, V/t] logits, turned into their gradient in place
  TensorView lse_;            // [chunk]
  CrossEntropyScratch ce_;    // 3 x [chunk] (tensor parallelism)
  TensorView dlosses_;        // [N] grad_scale · mask
  TensorView dx_;             // [Nl, h] running residual gradient
  TensorView rope_cos_, rope_sin_;  // [max_pos, d/2] (RoPE only)
  // f32 staging under --bf16/--fp16 (empty otherwise): one layer's weights and activations,
  // the vocabulary-sized embedding/output weight, and layer inputs/outputs (ping-pong).
  LayerTensors layer_w32_;
  LayerActivations layer_act32_;
  TensorView vocab_w32_, pos_w32_, final_w32_, final_b32_;
  TensorView x32_[2];         // [Nl, h]
};

}  // namespace mt
