// Owns one pre-norm transformer layer (Megatron's TransformerLayer with local attention and MLP):
//   a   = x + dropout(proj(attention(norm1(x))))
//   out = a + dropout(fc2(act(fc1(norm2(a)))))
// as an explicit forward/backward pair, with what the backward needs kept in LayerActivations.
#pragma once

#include <cstdint>

#include "backend/arena.h"
#include "base/rng.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/tensor_parallel.h"

namespace mt {

// N = s·b token rows; Nl = N/t of them on each rank under sequence parallelism (Nl = N otherwise):
// the residual stream (norms, dropout, residual adds) has Nl rows, the tensor-parallel core
// (QKV, attention, MLP) N rows and 1/t of the heads and MLP width. Shapes in [rows, features]
// unless stated; sizes are those of the config the layer runs on (ModelConfig::tp_local()).
// Saved between forward and backward.
// The tensors listed in kStoredActivations take the activation dtype (16-bit under --bf16/--fp16);
// norm statistics, lse, probabilities and masks stay f32/u8 as in Megatron.
// The norm outputs and the MLP activation output are not kept: the backward recomputes them from
// the saved inputs (one elementwise pass each) and saves ~40% of a layer's bytes.
struct LayerActivations {
  TensorView norm1_mean;      // [Nl]  (LayerNorm only)
  TensorView norm1_rstd;      // [Nl]
  TensorView q;               // [b, n, s, d]  after RoPE
  TensorView k, v;            // [b, g, s, d]  (k after RoPE)
  TensorView context;         // [N, n·d]  attention output, input of linear_proj
  TensorView lse;             // [b, n, s]     (flash attention)
  TensorView probs;           // [b, n, s, s]  (unfused attention)
  TensorView probs_mask;      // [b, n, s, s] u8 (unfused attention with dropout)
  TensorView attn_drop_mask;  // [Nl, h] u8
  TensorView residual1;       // [Nl, h]  a
  TensorView norm2_mean;      // [Nl]  (LayerNorm only)
  TensorView norm2_rstd;      // [Nl]
  TensorView fc1_out;         // [N, ffn or 2·ffn]  (empty under --recompute-modules mlp)
  TensorView mlp_drop_mask;   // [Nl, h] u8
  TensorView out;             // [Nl, h]  the layer output (next layer's input)
};

// The activation-dtype members of LayerActivations.
inline constexpr TensorView LayerActivations::*kStoredActivations[] = {
    &LayerActivations::q,         &LayerActivations::k,       &LayerActivations::v,
    &LayerActivations::context,   &LayerActivations::residual1, &LayerActivations::fc1_out,
    &LayerActivations::out};

// Scratch shared by all layers: transient outputs and backward temporaries (never saved).
struct LayerScratch {
  TensorView norm1_out;  // [Nl, h]           norm outputs and the MLP activation output, made in
  TensorView norm2_out;  // [Nl, h]           the forward and remade in the backward
  TensorView act_out;    // [N, ffn]
  TensorView fc1_out;    // [N, ffn or 2·ffn]    under --recompute-modules mlp only: fc1's output, remade in the backward
  TensorView qkv;        // [N, (n + 2g)·d]   forward: linear_qkv output; backward: dqkv
  TensorView dense;      // [Nl, h]           forward: proj / fc2 output; backward: their grads
  TensorView dnorm;      // [Nl, h]           grad of a norm output
  TensorView dcontext;   // [N, n·d]
  TensorView dq, dk, dv; // like q, k, v
  TensorView dfc1;       // [N, ffn or 2·ffn]
  TensorView dact;       // [N, ffn]
  TensorView attention;  // f32 workspace for attention backward
  // Sequence parallelism only (empty otherwise): a gathered [N, h] input or output gradient, and
  // the [N, h] partial sums before a reduce-scatter. Not made by alloc_layer_scratch: the owner
  // allocates them apart, since its output layer uses them too.
  TensorView sp_gathered, sp_partial;
};

struct LayerShape {
  int64_t s = 0, b = 0;
  int64_t sp = 1;  // ranks the sequence is split over (tp under --sequence-parallel, else 1)
  int64_t rows() const { return s * b; }              // N
  int64_t local_rows() const { return s / sp * b; }   // Nl
};

// Carves one layer's saved activations out of `arena` (a measuring arena gives the size); the
// kStoredActivations members in `dtype`, the rest f32/u8.
// with_output = false leaves `out` empty (the caller provides it).
LayerActivations alloc_layer_activations(Arena& arena, const ModelConfig& c, LayerShape shape, DType dtype,
                                         bool with_output = true);
LayerScratch alloc_layer_scratch(Arena& arena, const ModelConfig& c, LayerShape shape, int threads);

// Everything a layer needs besides its weights and buffers.
struct LayerContext {
  const ModelConfig* config = nullptr;
  LayerShape shape;
  TensorView rope_cos, rope_sin;  // [max_pos, d/2] or empty
  TensorView positions;           // i32 [b, s] RoPE positions (--reset-position-ids), or empty: sequence index
  TensorView key_start;           // i32 [b, s] document starts (--reset-attention-mask), or empty: causal
  uint64_t seed = 0;              // dropout seed
  uint64_t dropout_round = 0;     // advances every micro-batch so masks differ between them
  bool dropout = true;            // false in evaluation
  DType act_dtype = DType::f32;   // every activation the layer produces is rounded to it
  int64_t layer_index = 0;        // global layer number (streams are keyed by it)
  TensorParallel tp;              // the layer's tensor-parallel group
  int64_t total_heads = 0;        // query heads of the whole layer (config->num_attention_heads · tp)
};

// All tensors f32 (the caller stages 16-bit weights and activations); each activation the
// forward produces is rounded to ctx.act_dtype right away, so later ops see the stored values.
// x: [Nl, h] layer input (kept by the caller: it is the previous layer's output).
// with_output = false serves recomputation before the backward when the output is saved already:
// the pass stops once everything the backward reads exists, skipping the MLP activation, fc2 and
// the output residual (a third of the layer's forward FLOPs) and redrawing only the MLP dropout mask.
void transformer_layer_fwd(const LayerContext& ctx, const LayerTensors& w, const TensorView& x,
                           LayerActivations& act, const LayerScratch& scratch, bool with_output = true);

// dx_inout: [Nl, h]; on entry the gradient of the layer output, on exit the gradient of its input.
// Weight gradients accumulate into g.
void transformer_layer_bwd(const LayerContext& ctx, const LayerTensors& w, const LayerTensors& g,
                           const TensorView& x, const LayerActivations& act, const LayerScratch& scratch,
                           const TensorView& dx_inout);

// The dropout stream for one site of one layer in one round (site: "attention", "attn_out", ...).
RngStream dropout_stream(uint64_t seed, uint64_t round, int64_t layer, const char* site);

}  // namespace mt
