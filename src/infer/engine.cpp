#include "infer/engine.h"

#include <algorithm>

#include "backend/gemm.h"
#include "base/error.h"
#include "model/blocks/embedding.h"
#include "model/blocks/norm_act.h"
#include "model/layer.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "parallel/layers.h"
#include "parallel/mappings.h"

namespace mt {

// One step's buffers, carved from the workspace for its own sizes (T new tokens, R logit rows).
struct InferenceEngine::StepBuffers {
  TensorView tokens, positions;       // i32 [1, T]
  TensorView flat_positions, slots;   // i32 [T]
  TensorView x[2];                    // f32 [T, h]: a layer's input and output
  TensorView embedding_mask;          // u8 [T, h] (no dropout: never written)
  LayerActivations act;               // one layer's transients, reused by every layer
  LayerScratch scratch;
  TensorView selected, final_out;     // f32 [R, h]
  TensorView mean, rstd;              // f32 [R]
  TensorView local_logits;            // f32 [R, V/t]
  TensorView logits, gather_scratch;  // f32 [R, V] (tensor parallelism only)
};

InferenceEngine::StepBuffers InferenceEngine::carve(Arena& a, int64_t T, int64_t R) const {
  StepBuffers b;
  const int64_t h = local_.hidden_size, vocab = config_.padded_vocab_size();
  const int tp = static_cast<int>(config_.tensor_model_parallel_size);
  const LayerShape shape{T, 1, 1};
  b.tokens = a.alloc(DType::i32, {1, T});
  b.positions = a.alloc(DType::i32, {1, T});
  b.flat_positions = b.positions.reshape({T});
  b.slots = a.alloc(DType::i32, {T});
  for (TensorView& x : b.x) x = a.alloc(DType::f32, {T, h});
  b.embedding_mask = a.alloc(DType::u8, {T, h});
  const MlpKinds kinds = config_.mlp_kinds(0, config_.num_layers);
  b.act = alloc_layer_activations(a, local_, shape, DType::f32, kinds, /*with_output=*/false);
  b.scratch = alloc_layer_scratch_fwd(a, local_, shape, kinds, WorkspaceTarget{});  // no context parallelism
  b.selected = a.alloc(DType::f32, {R, h});
  b.final_out = a.alloc(DType::f32, {R, h});
  b.mean = a.alloc(DType::f32, {R});
  b.rstd = a.alloc(DType::f32, {R});
  b.local_logits = a.alloc(DType::f32, {R, vocab / tp});
  if (tp > 1) {
    b.logits = a.alloc(DType::f32, {R, vocab});
    b.gather_scratch = a.alloc(DType::f32, {R * vocab});
  } else {
    b.logits = b.local_logits;
  }
  return b;
}

int64_t kv_cache_bytes_per_slot(const ModelConfig& config, int64_t max_sequence_length) {
  const ModelConfig local = config.tp_local();
  return 2 * config.num_layers * local.num_query_groups * max_sequence_length * local.kv_channels *
         static_cast<int64_t>(sizeof(float));
}

InferenceEngine::InferenceEngine(const ModelConfig& config, Backend& backend, MemoryTracker* tracker,
                                 const EngineOptions& options)
    : config_(config), options_(options), backend_(backend) {
  const int tp = static_cast<int>(config_.tensor_model_parallel_size);
  const int tp_size = options.tp_comm ? options.tp_comm->size() : 1;
  MT_CHECK(tp == tp_size) << "the model is split " << tp << " ways but the tensor-parallel group has " << tp_size
                          << " ranks";
  MT_CHECK(options.slots >= 1 && options.max_step_tokens >= 1)
      << "the inference engine needs at least one cache slot and one token per step";
  max_len_ = options.max_sequence_length ? options.max_sequence_length : config_.max_position_embeddings;
  MT_CHECK(max_len_ >= 1 && max_len_ <= config_.max_position_embeddings)
      << "a sequence of " << max_len_ << " tokens is longer than the model's " << config_.max_position_embeddings
      << " positions (--max-position-embeddings)";
  config_.sequence_parallel = false;  // one step's rows are not split along a sequence
  ShardRanks ranks = shard_sizes(config_);
  ranks.tp_rank = options.tp_comm ? options.tp_comm->rank() : 0;
  if (config_.moe.enabled()) {
    const ExpertParallel& e = options.experts;
    MT_CHECK(e.ep_size() == ranks.ep && e.etp_size() == ranks.etp)
        << "the expert groups have " << e.ep_size() << " x " << e.etp_size() << " ranks but the model is split over "
        << ranks.ep << " x " << ranks.etp << " (--expert-model-parallel-size x --expert-tensor-parallel-size)";
    ranks.ep_rank = e.ep_rank();
    ranks.etp_rank = e.etp_rank();
  }
  ModelConfig weights = config_;
  weights.params_dtype = DType::f32;
  params_ = std::make_unique<ParamStore>(weights, StageRange::whole(weights), backend, tracker, ranks, DdpConfig{},
                                         ParamSet::all);
  local_ = config_.tp_local();
  local_.hidden_dropout = local_.attention_dropout = 0.0f;
  local_.attention_impl = AttentionImpl::flash;  // no [s, s] probabilities are carved

  // The cache and the RoPE tables, sized by carving them from a measuring arena first.
  const int64_t g = local_.num_query_groups, d = local_.kv_channels;
  const auto carve_persistent = [&](Arena& a) {
    k_cache_.clear();
    v_cache_.clear();
    expert_biases_.clear();
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      k_cache_.push_back(a.alloc(DType::f32, {options.slots, g, max_len_, d}));
      v_cache_.push_back(a.alloc(DType::f32, {options.slots, g, max_len_, d}));
      if (config_.moe.expert_bias && config_.mlp_kind(i) == MlpKind::moe)
        expert_biases_.emplace_back(expert_bias_name(i), a.alloc(DType::f32, {config_.moe.num_experts}));
    }
    if (config_.position_embedding_type == PositionEmbedding::rope) {
      rope_cos_ = a.alloc(DType::f32, {config_.max_position_embeddings, config_.rope_table_width()});
      rope_sin_ = a.alloc(DType::f32, {config_.max_position_embeddings, config_.rope_table_width()});
    }
  };
  Arena measure_cache(MemCategory::activations), measure_step(MemCategory::workspace);
  carve_persistent(measure_cache);
  cache_arena_ = std::make_unique<Arena>(backend, MemCategory::activations, measure_cache.used(), tracker);
  carve_persistent(*cache_arena_);
  if (!rope_cos_.empty()) rope_tables(rope_cos_, rope_sin_, config_.rotary_base, config_.rotary_dim());
  layers_ = params_->values().layers;
  size_t bias = 0;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    if (!config_.moe.expert_bias || config_.mlp_kind(i) != MlpKind::moe) continue;
    const TensorView& b = expert_biases_[bias++].second;
    zero(b);
    layers_[static_cast<size_t>(i)].moe.expert_bias = b;
  }
  carve(measure_step, options.max_step_tokens, options.max_step_tokens);
  workspace_ = std::make_unique<Arena>(backend, MemCategory::workspace, measure_step.used(), tracker);
  // A step's inputs are written, and its logits read, in host memory, then copied (device-clean).
  const auto T = static_cast<size_t>(options.max_step_tokens);
  host_tokens_.resize(T);
  host_positions_.resize(T);
  host_slots_.resize(T);
  host_rows_.resize(T);
  if (backend.device() != Device::cpu) host_logits_.resize(T * static_cast<size_t>(config_.padded_vocab_size()));
}

InferenceEngine::~InferenceEngine() = default;

TensorView InferenceEngine::step(const std::vector<SequenceChunk>& chunks) {
  const GemmInputsScope gemm_inputs(options_.activation_dtype);
  MT_CHECK(!chunks.empty()) << "an inference step needs at least one sequence";
  int64_t T = 0, R = 0;
  for (const SequenceChunk& c : chunks) {
    MT_CHECK(c.slot >= 0 && c.slot < options_.slots) << "cache slot " << c.slot << " of " << options_.slots;
    MT_CHECK(c.count >= 1 && c.start >= 0 && c.start + c.count <= max_len_)
        << "a sequence of " << c.start + c.count << " tokens does not fit the cache's " << max_len_ << " positions";
    T += c.count;
    R += c.all_logits ? c.count : 1;
  }
  MT_CHECK(T <= options_.max_step_tokens) << "a step of " << T << " tokens exceeds the engine's "
                                          << options_.max_step_tokens << " (EngineOptions::max_step_tokens)";
  workspace_->reset();  // the previous step's buffers
  StepBuffers b = carve(*workspace_, T, R);
  const int64_t vocab = config_.padded_vocab_size();
  int64_t row = 0, out = 0;
  for (const SequenceChunk& c : chunks)
    for (int64_t i = 0; i < c.count; ++i, ++row) {
      MT_CHECK(c.tokens[i] >= 0 && c.tokens[i] < config_.vocab_size)
          << "token id " << c.tokens[i] << " is outside the vocabulary [0, " << config_.vocab_size << ")";
      host_tokens_[row] = c.tokens[i];
      host_positions_[row] = static_cast<int32_t>(c.start + i);
      host_slots_[row] = static_cast<int32_t>(c.slot);
      if (c.all_logits || i == c.count - 1) host_rows_[out++] = row;
    }
  backend_.copy_from_host(b.tokens.data, host_tokens_.data(), b.tokens.bytes());
  backend_.copy_from_host(b.positions.data, host_positions_.data(), b.positions.bytes());
  backend_.copy_from_host(b.slots.data, host_slots_.data(), b.slots.bytes());

  TensorParallel tp;
  tp.comm = options_.tp_comm;
  LayerContext ctx;
  ctx.config = &local_;
  ctx.shape = {T, 1, 1};
  ctx.tp = tp;
  ctx.experts = options_.experts;
  ctx.total_heads = config_.num_attention_heads;
  ctx.rope_cos = rope_cos_;
  ctx.rope_sin = rope_sin_;
  ctx.positions = b.positions;
  ctx.dropout = false;
  ctx.act_dtype = options_.activation_dtype;
  ctx.layer_index = -1;
  const GptTensors& w = params_->values();
  const VocabShard shard{tp.rank() * (vocab / tp.size()), vocab};
  TensorView x = b.x[0];
  embedding_block_fwd(ctx, {w.word_embeddings, w.position_embeddings}, shard, {b.tokens, b.positions}, x,
                      b.embedding_mask, b.scratch.dense, TensorView());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    ctx.layer_index = i;
    ctx.kv_cache = {k_cache_[i], v_cache_[i], b.slots, b.flat_positions};
    LayerActivations act = b.act;
    act.out = b.x[(i + 1) % 2];
    transformer_layer_fwd(ctx, layers_[static_cast<size_t>(i)], x, act, b.scratch);
    x = act.out;
  }
  // The head on the rows asked for: final norm, output layer (this rank's vocabulary columns).
  for (int64_t r = 0; r < R; ++r) copy_tensor(b.selected.rows(r, 1), x.rows(host_rows_[r], 1));
  norm_fwd(local_, b.final_out, b.mean, b.rstd, b.selected, w.final_norm_weight, w.final_norm_bias);
  ctx.round(b.final_out);
  column_parallel_linear_fwd(tp, b.local_logits, b.final_out, w.output_weight, TensorView(), TensorView());
  ctx.round(b.local_logits);
  if (tp.active()) gather_from_tp_fwd(tp, b.logits, b.local_logits, b.gather_scratch);
  if (b.logits.device == Device::cpu) return b.logits;
  const TensorView host(host_logits_.data(), DType::f32, b.logits.shape);
  backend_.copy_to_host(host.data, b.logits.data, b.logits.bytes());
  return host;
}

}  // namespace mt
