// Owns the inference engine: a whole model (one tensor-parallel rank's shards) run forward only,
// one step at a time, over the new tokens of several sequences, each sequence keeping its keys and
// values in its own slot of a KV cache. A step takes any mix of prompt prefills (many tokens of a
// sequence) and decodes (one token each) as one batch of rows, runs the same transformer layers
// training runs (model/layer.h; the attention block reads and extends the cache), and returns the
// logits of the rows asked for, over the whole vocabulary on every tensor-parallel rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/arena.h"
#include "model/params.h"
#include "parallel/expert_dispatch.h"

namespace mt {

struct EngineOptions {
  int64_t slots = 1;                // sequences whose caches are held at once
  int64_t max_sequence_length = 0;  // positions a slot holds (prompt + generated); 0: max_position_embeddings
  int64_t max_step_tokens = 512;    // new tokens one step takes, all sequences together
  // The activation dtype the model was trained in: --bf16 / --fp16 models round every activation
  // as their training forward did (weights are held in f32, which holds 16-bit values exactly).
  DType activation_dtype = DType::f32;
  Communicator* tp_comm = nullptr;  // the tensor-parallel group (config.tensor_model_parallel_size ranks)
  // MoE models: the expert groups inside the tp group (config's --expert-model-parallel-size and
  // --expert-tensor-parallel-size; empty: every rank holds every expert whole). Each rank holds its
  // experts' shards; every tp rank has the step's rows, so the dispatcher gathers copies of them and
  // sends each copy's expert outputs back to it (more traffic than needed, the same arithmetic).
  ExpertParallel experts;
};

// Bytes of KV cache one slot takes on one tensor-parallel rank of `config` (finalized) for
// sequences of `max_sequence_length` positions: what a cap on cache memory divides.
int64_t kv_cache_bytes_per_slot(const ModelConfig& config, int64_t max_sequence_length);

// The new tokens of one sequence in a step.
struct SequenceChunk {
  int64_t slot = 0;
  int64_t start = 0;  // position of tokens[0]; positions before it are already in the slot's cache
  const int32_t* tokens = nullptr;
  int64_t count = 0;
  bool all_logits = false;  // logits of every token (prompt log-probabilities), not only of the last
};

class InferenceEngine {
 public:
  // config: the model (finalized; its tensor_model_parallel_size is the tp group's size).
  InferenceEngine(const ModelConfig& config, Backend& backend, MemoryTracker* tracker, const EngineOptions& options);
  ~InferenceEngine();

  // The weights, f32: fill them (CheckpointReader::read_weights) before the first step.
  ParamStore& params() { return *params_; }
  // With --moe-router-enable-expert-bias, each MoE layer's router bias f32 [E] by its checkpoint
  // name (decoder.layers.<i>.mlp.router.expert_bias, as the trainer's); zero until filled
  // (CheckpointReader::read_buffers). Routing adds it as training does.
  const std::vector<std::pair<std::string, TensorView>>& expert_biases() const { return expert_biases_; }
  const ModelConfig& config() const { return config_; }
  const EngineOptions& options() const { return options_; }
  int64_t max_sequence_length() const { return max_len_; }

  // Runs the chunks' tokens, appending their keys and values to their slots. Returns f32 logits
  // [R, padded vocabulary] in host memory, one row per chunk (its last token's) or, for an
  // all_logits chunk, one per token, in chunk order; the same on every tp rank. Valid until the
  // next step. A chunk overwrites its slot's cache from `start` on, so restarting a slot at 0
  // starts a new sequence.
  TensorView step(const std::vector<SequenceChunk>& chunks);

 private:
  struct StepBuffers;
  // One step's buffers for T new tokens and R logit rows (from a measuring arena: the size).
  StepBuffers carve(Arena& arena, int64_t tokens, int64_t rows) const;

  ModelConfig config_;  // the whole model
  ModelConfig local_;   // what this tp rank computes, without dropout
  EngineOptions options_;
  Backend& backend_;  // where the weights, the cache and the step's buffers live
  int64_t max_len_ = 0;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Arena> cache_arena_;  // the KV cache and the RoPE tables
  std::unique_ptr<Arena> workspace_;    // one step's buffers, carved anew each step
  std::vector<TensorView> k_cache_, v_cache_;  // per layer, f32 [slots, g/t, max_len, d]
  std::vector<std::pair<std::string, TensorView>> expert_biases_;  // see expert_biases()
  std::vector<LayerWeights> layers_;  // the layers' weights (params_'s views) with their expert biases
  TensorView rope_cos_, rope_sin_;             // [max_position_embeddings, ceil(rotary_dim/2)] (RoPE)
  // Host mirrors of one step (max_step_tokens entries): inputs, the token row of each logit row,
  // and (off the CPU) the logits [R, padded vocabulary] handed back.
  std::vector<int32_t> host_tokens_, host_positions_, host_slots_;
  std::vector<int64_t> host_rows_;
  std::vector<float> host_logits_;
};

}  // namespace mt
