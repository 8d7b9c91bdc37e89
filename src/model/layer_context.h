// Owns LayerContext and LayerShape: what every block of a transformer layer needs besides its
// weights and buffers (shapes, the tensor-parallel group, this micro-batch's positions, document
// starts and first sample), and the dropout streams keyed by (seed, global layer, site).
#pragma once

#include <cstdint>

#include "base/rng.h"
#include "model/config.h"
#include "ops/dropout.h"  // DropoutRows
#include "parallel/context_parallel.h"
#include "parallel/expert_dispatch.h"
#include "parallel/tensor_parallel.h"
#include "tensor/tensor.h"

namespace mt {

struct MoeLayerStats;

// N = s·b token rows (s: this context-parallel rank's tokens of each sequence); Nl = N/t of them on
// each rank under sequence parallelism (Nl = N otherwise):
// the residual stream (norms, dropout, residual adds) has Nl rows, the tensor-parallel core
// (QKV, attention, MLP) N rows and 1/t of the heads and MLP width.
struct LayerShape {
  int64_t s = 0, b = 0;
  int64_t sp = 1;  // ranks the sequence is split over (tp under --sequence-parallel, else 1)
  int64_t rows() const { return s * b; }              // N
  int64_t local_rows() const { return s / sp * b; }   // Nl
};

// Inference against a KV cache (forward only; the rows are one step's new tokens of any
// sequences: shape s = T, b = 1, and ctx.positions [1, T] each row's place in its sequence). The
// attention block writes the rows' keys and values into their slots and attends over the cache
// (ops/attention.h's kv_cache_*) instead of within the rows.
struct KvCacheStep {
  TensorView k, v;       // this layer's cache: f32 [slots, g/t, P, d]
  TensorView slots;      // i32 [T]: each row's cache slot
  TensorView positions;  // i32 [T]: ctx.positions, flat
  bool active() const { return !k.empty(); }
};

struct LayerContext {
  const ModelConfig* config = nullptr;  // what one tp rank computes (ModelConfig::tp_local())
  LayerShape shape;
  TensorView rope_cos, rope_sin;  // [max_pos, ceil(rotary_dim/2)] or empty (config->rope_form() pairs them)
  TensorView positions;           // i32 [b, s] RoPE positions (--reset-position-ids), or empty: sequence index
  TensorView key_start;           // i32 [b, s] document starts (--reset-attention-mask), or empty: causal
  uint64_t seed = 0;              // dropout seed
  uint64_t first_sample = 0;      // global index of the micro-batch's first sample (dropout masks)
  bool dropout = true;            // false in evaluation and inference (Megatron's eval(): also Sinkhorn off)
  DType act_dtype = DType::f32;   // every activation the layer produces is rounded to it
  int64_t layer_index = 0;        // global layer number (streams are keyed by it)
  TensorParallel tp;              // the layer's tensor-parallel group
  ContextParallel cp;             // the context-parallel group (attention exchanges keys and values)
  ExpertParallel experts;         // MoE layers: the expert groups the tokens are dispatched over
  int64_t total_heads = 0;        // query heads of the whole layer (config->num_attention_heads · tp)
  KvCacheStep kv_cache;           // inference with a KV cache; empty otherwise
  // MoE layers: the gradient the load-balancing and z-losses give the router (the main loss's
  // backward scale, Megatron's MoEAuxLossAutoScaler), and where a training forward reports the
  // losses and tokens per expert (null: not reported, e.g. a recomputation's rerun).
  float aux_loss_scale = 0.0f;
  MoeLayerStats* moe_stats = nullptr;
  Communicator* dp = nullptr;  // the data-parallel group (--moe-router-load-balancing-type global_aux_loss)

  float hidden_dropout() const { return dropout ? config->hidden_dropout : 0.0f; }
  // Where the residual stream's dropout draws (ops/dropout.h): keyed by the global sample and
  // position, so neither the micro-batch grouping nor the sequence- or context-parallel split
  // changes a mask.
  DropoutRows residual_rows() const {
    return DropoutRows(first_sample, shape.b, shape.s * cp.size(), tp.first_row(shape.rows()) / shape.b,
                       cp.rows(shape.s));
  }
  void round(const TensorView& t) const;  // round_to_dtype(t, act_dtype)
};

// The dropout stream for one site of one layer (site: "attention", "attention_output",
// "mlp_output"; "embedding" with layer -1).
RngStream dropout_stream(uint64_t seed, int64_t layer, const char* site);

}  // namespace mt
