// Owns Stage: the part of the GPT model one rank holds for one model chunk (a contiguous range of
// global layers, plus the embedding on the first stage and the final norm, output layer and loss
// on the last; a whole model is one Stage covering everything), as explicit forward/backward
// passes over preallocated buffers.
//
// Per-micro-batch state lives in slots (DESIGN invariant 8): a Stage carves N activation slots,
// each holding one micro-batch's inputs, dropout round and every saved tensor, so several
// micro-batches can be in flight (pipeline schedules): any order of forwards and backwards over
// distinct slots is legal. Buffers that no two passes use at once (layer scratch, the
// recomputation pool, the output layer's logits chunk, and a stage's output without the head,
// which is sent on at once and never read by the backward) are shared by all slots.
//
// The forward-only path keeps nothing and needs no labels: it serves evaluation (loss sums) and
// inference (logits out); its transient per-layer buffers lie over the backward-only scratch.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/blocks/embedding.h"
#include "model/blocks/output_head.h"
#include "model/activation_ledger.h"
#include "model/layer.h"
#include "model/micro_batch.h"
#include "model/params.h"
#include "model/recompute.h"
#include "model/stage_buffers.h"

namespace mt {

struct StageOptions {
  int slots = 1;                    // micro-batches that may be in flight at once (0: forward-only use)
  int threads = 0;                  // threads the workspaces are sized for; 0 = the backend's
  int64_t head_chunk_tokens = 512;  // rows of logits alive at once in the output layer
  // The tensor-parallel group (size config.tensor_model_parallel_size); its sequence_parallel
  // flag is taken from the config. Every rank of the group runs the same micro-batch.
  Communicator* tp_comm = nullptr;
  // The expert groups (ranks 0 of 1 when null); their sizes must be the config's
  // --expert-model-parallel-size and --expert-tensor-parallel-size.
  Communicator* ep_comm = nullptr;
  Communicator* etp_comm = nullptr;
  Communicator* etp_ep_comm = nullptr;  // etp × ep: the allgather dispatcher's group
  Communicator* dp_comm = nullptr;      // data parallel: global_aux_loss's counts
  // The context-parallel group (size config.context_parallel_size): every rank of it reads the
  // same micro-batch and runs its own two chunks of each sequence (parallel/context_parallel.h).
  Communicator* cp_comm = nullptr;
  // How the parameter and gradient buffers are laid out (param_layout.h): the dense parameters'
  // over dp; an MoE model's expert weights sit in a buffer of their own over expert-dp.
  DdpConfig ddp;
};

// What a forward returns: the output hidden states (a stage without the head) or the loss sums
// (the stage with it).
struct StageForward {
  // [Nl, h]: a training forward's is in the activation dtype, valid until the next forward (the
  // stage does not keep it: its backward never reads it, so all slots share one output buffer, as
  // Megatron frees a stage's output once sent); forward_only's is f32 scratch, valid until the
  // next forward, backward or forward_only.
  TensorView hidden;
  LossSums loss;
};

class Stage {
 public:
  // micro_batch and config.seq_length fix every activation shape.
  Stage(const ModelConfig& config, StageRange range, int64_t micro_batch, Backend& backend, MemoryTracker* tracker,
        const StageOptions& options = {});

  // Runs `batch` through the stage, keeping what the backward needs in `slot` when
  // options.grad_scale != 0 (the slot is then busy until its backward). input: the previous
  // stage's output [Nl, h] (f32 or the activation dtype), empty on the first stage, which embeds
  // batch.tokens. Every stage reads position_ids and document_start; the last reads labels and
  // loss_mask. The batch holds whole sequences [b, seq_length]; under context parallelism the
  // stage takes its rank's chunks of them, and the loss sums are this rank's tokens'.
  StageForward forward(int slot, const MicroBatch& batch, const TensorView& input, const ForwardOptions& options);
  // The backward of the micro-batch in `slot`: accumulates its weight gradients and frees the
  // slot. output_grad: [Nl, h] f32, the gradient of this stage's output (empty on the last stage,
  // whose loss ends the graph). Returns the gradient of the input [Nl, h] f32, valid until the
  // next backward (empty on the first stage).
  TensorView backward(int slot, const TensorView& output_grad);
  // No dropout, no slot, nothing saved. The last stage computes the loss sums when batch.labels
  // is given and writes every row's logits [N, V_padded/t] (rows in [s, b] order) into `logits`
  // when it is not empty; other stages return their output hidden states.
  StageForward forward_only(const MicroBatch& batch, const TensorView& input, const TensorView& logits = {});

  // Called during each backward as groups of parameters get their gradient contribution from it
  // (the head's, then each layer's from the last, then the embedding's), with their indices into
  // params(): data parallelism can start reducing a bucket once the last micro-batch's backward
  // has finished all of its parameters (--overlap-grad-reduce).
  using GradsReady = std::function<void(ParamStore::IndexRange)>;
  void on_grads_ready(GradsReady callback) { grads_ready_ = std::move(callback); }

  // Called during each forward (training or forward-only) before it reads a group of parameters
  // (the embedding's, each layer's in order, the head's): the distributed optimizer's overlapped
  // parameter gather (--overlap-param-gather) waits there for the buckets that hold them.
  using ParamsNeeded = std::function<void(ParamStore::IndexRange)>;
  void on_params_needed(ParamsNeeded callback) { params_needed_ = std::move(callback); }

  // The dense parameters (all of them for a dense model), and the routed experts' weights (null
  // without MoE layers), in buffers of their own.
  ParamStore& params() { return *params_; }
  ParamStore* expert_params() { return expert_params_.get(); }
  // Both stores, dense first.
  std::vector<ParamStore*> param_stores();
  // The parameter of that name in either store (mt::Error when neither has it).
  Param& param(const std::string& name);
  void zero_grads();
  // Megatron's init of every parameter in both stores (ParamStore::init); expert biases to zero.
  void init_params(uint64_t seed);
  // --moe-router-enable-expert-bias: each MoE layer's f32 [E] bias by its Megatron name
  // (decoder.layers.<i>.mlp.router.expert_bias); empty otherwise. The same on every rank.
  const std::vector<std::pair<std::string, TensorView>>& expert_biases() const { return expert_biases_; }
  // The aux-loss-free update of every MoE layer's bias from that layer's global token counts
  // (tokens_per_expert: [num_layers][E] over the whole model, summed over every rank).
  void update_expert_biases(const std::vector<double>& tokens_per_expert);
  const ModelConfig& config() const { return config_; }
  const StageRange& range() const { return range_; }
  const TensorParallel& tensor_parallel() const { return tp_; }
  int64_t micro_batch() const { return b_; }
  // [Nl, h], Nl = s·b (s·b/t under sequence parallelism): the hidden states passed between stages.
  Shape hidden_shape() const { return buf_.dx.shape; }
  int slots() const { return static_cast<int>(buf_.slots.size()); }
  bool slot_busy(int slot) const;
  // Logits [rows, V_padded / t] of the last chunk of the last forward() (all s·b rows when
  // head_chunk_tokens >= s·b and grad_scale was 0); valid until the next forward(), backward() or
  // forward_only(), since it shares memory with the layers' scratch. For tests.
  TensorView last_logits_chunk() const { return buf_.head_scratch.logits_chunk; }
  // Bytes of saved activations (exact, as carved from the arena), all slots together.
  size_t activation_bytes() const { return activations_->requested(); }
  // What global layer `layer` keeps per micro-batch, from the buffers carved for it (under full
  // recomputation only a group's last output: the rest lives in a pool all slots share). Empty
  // when the stage has no slots.
  std::vector<LedgerEntry> layer_ledger(int64_t layer) const;
  void set_seed(uint64_t seed) { seed_ = seed; }
  // Each layer's MoE figures (losses, tokens per expert, dropped choices) summed over the training
  // forwards since the last reset, one entry per layer of the stage (empty for dense layers).
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  void reset_moe_stats();

 private:
  StageSlot& slot_at(int slot, const char* op);
  void carve_expert_biases(Backend& backend, MemoryTracker* tracker);
  void load_inputs(StageInputs& in, const MicroBatch& batch, const char* op);
  LayerContext context(const StageInputs& in, uint64_t first_sample, bool dropout, int64_t layer) const;
  bool mixed() const { return config_.params_dtype != DType::f32; }
  int64_t local(int64_t layer) const { return layer - range_.first_layer; }
  // Layer i's forward from its f32 input; stores its activations in the slot and returns its f32
  // output (with_output = false: a rerun before the backward that stops short of fc2 and returns
  // an empty view, see transformer_layer_fwd).
  // `record`: a training forward reporting its MoE figures (not a recomputation's rerun).
  TensorView layer_fwd(StageSlot& slot, int64_t layer, const TensorView& x, bool dropout, bool record,
                       bool with_output = true);
  // The previous stage's output hidden states (f32 or the activation dtype) into dst, checked.
  void receive(const TensorView& input, const TensorView& dst, const char* op);
  // The input of `layer` as f32: the stage's input or the previous layer's saved output, itself
  // or (16-bit) staged.
  TensorView layer_input_f32(const StageSlot& slot, int64_t layer, const TensorView& staging);
  // f32 views of layer i's weights: the parameters themselves, or (16-bit) a staged copy.
  LayerWeights layer_weights_f32(int64_t layer);
  // f32 views of a layer's saved activations: the tensors themselves, or (16-bit) staging views
  // filled from them when `load` is set.
  LayerActivations layer_activations_f32(const LayerActivations& saved, bool load);
  // f32 view of a tensor: itself, or `staging` filled from it.
  TensorView as_f32(const TensorView& t, const TensorView& staging);
  EmbeddingWeights embedding_weights_f32();
  HeadWeights head_weights_f32();
  NormWeights final_norm_f32();
  HeadWeights head_grads() const;
  // Labels, loss mask and grad_scale · mask into the [s, b] row order on the device; returns Σ mask.
  double load_labels(const MicroBatch& batch, float grad_scale, const char* op);
  // This context-parallel rank's columns [b, s] of a whole-sequence i32 batch tensor [b, seq_length]
  // (checked): the tensor itself without context parallelism, else gathered into host_ids_.
  const int32_t* local_ids(const TensorView& t, const char* name, const char* op);
  // Whole-sequence index of local token i.
  int64_t global_position(int64_t i) const { return cp_rows_.position(i); }
  LossSums loss_sums(double num_tokens);
  VocabShard vocab_shard() const;

  ModelConfig config_;
  ModelConfig local_;  // what one tensor-parallel rank computes (config_.tp_local())
  StageRange range_;
  RecomputePlan recompute_;
  TensorParallel tp_;
  ContextParallel cp_;
  SeqRows cp_rows_;  // where this rank's s_ tokens sit in a sequence (the identity without cp)
  ExpertParallel experts_;
  Communicator* dp_ = nullptr;
  LayerShape shape_;
  Backend& backend_;
  uint64_t seed_ = 1234;
  int64_t s_ = 0, b_ = 0;  // s_: this context-parallel rank's tokens of each sequence
  int64_t seq_length_ = 0;  // a whole sequence's
  std::unique_ptr<ParamStore> params_, expert_params_;
  GptTensors values_, grads_;  // views by role over both stores
  std::unique_ptr<Arena> state_;  // the expert biases
  std::vector<std::pair<std::string, TensorView>> expert_biases_;
  std::vector<int64_t> bias_layers_;  // the global layer of each
  std::vector<float> host_counts_;  // [E], for the bias update
  std::unique_ptr<Arena> bias_counts_arena_;
  TensorView bias_counts_;  // f32 [E]: host_counts_ on the device
  std::unique_ptr<Arena> activations_;
  std::unique_ptr<Arena> workspace_;
  StageBuffers buf_;  // every buffer of both arenas (stage_buffers.h)
  std::vector<MoeLayerStats> moe_stats_;
  GradsReady grads_ready_;
  ParamsNeeded params_needed_;
  void need(ParamStore::IndexRange params) const {
    if (params_needed_) params_needed_(params);
  }

  // Host staging of the [N] per-token vectors, in row order [s, b] (sized once).
  std::vector<float> mask_sb_, host_dlosses_, host_losses_;
  std::vector<int32_t> host_labels_;
  std::vector<int32_t> host_ids_;  // [b, s]: local_ids' staging
};

}  // namespace mt
