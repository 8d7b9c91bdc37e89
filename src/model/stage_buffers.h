// Owns the memory layout of a Stage: every buffer it carves from its two arenas (activations:
// what its micro-batches keep between forward and backward, slot by slot; workspace: scratch
// that no two passes use at once), and the measurement of both from the configuration alone, so
// `megatron plan` predicts a stage's memory by the very code that lays it out.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/arena.h"
#include "model/blocks/output_head.h"
#include "model/config.h"
#include "model/layer.h"
#include "model/params.h"

namespace mt {

// What fixes a stage's buffers.
struct StageGeometry {
  ModelConfig config;  // the whole model, finalized
  StageRange range;
  int64_t micro_batch = 1;
  int slots = 1;                    // micro-batches in flight (0: forward-only use)
  WorkspaceTarget target;           // what the attention workspace is sized for
  int64_t head_chunk_tokens = 512;  // rows of logits alive at once in the output layer
};

// A micro-batch's token-level inputs on the device.
struct StageInputs {
  TensorView tokens, positions, doc_start;  // i32 [b, s]
  bool has_positions = false, has_doc_start = false;
};

// One micro-batch's state, from its forward to its backward.
struct StageSlot {
  bool busy = false;    // forward done, backward pending
  uint64_t first_sample = 0;  // the forward's first global sample (dropout masks) and switch, which its backward reuses
  bool dropout = true;
  float aux_loss_scale = 0.0f;  // the forward's ForwardOptions::aux_loss_scale
  StageInputs in;
  TensorView emb_drop_mask;              // u8 [Nl, h] (first stage)
  TensorView input;                      // [Nl, h] the first layer's input: embedding output or received hidden states
  std::vector<LayerActivations> layers;  // one per layer of the stage (the last one's out: see output)
  HeadSaved head;                        // (last stage)
};

struct StageBuffers {
  // Activations.
  std::vector<StageSlot> slots;
  TensorView output;  // a stage without the head: every slot's last-layer output (sent on at once)
  TensorView losses;  // [N] the head's per-token losses
  // Workspace.
  TensorView labels, dlosses;  // [N] (consumed within the forward)
  LayerScratch scratch;
  HeadScratch head_scratch;
  TensorView dx;                   // [Nl, h] running residual gradient
  TensorView rope_cos, rope_sin;   // [max_pos, ceil(rotary_dim/2)] (RoPE only)
  // The forward-only path: its inputs, one layer's transient activations (f32) and its layers'
  // inputs/outputs (ping-pong), laid over the backward-only scratch.
  StageInputs transient_in;
  LayerActivations transient;
  TensorView transient_x[2];
  // f32 staging under --bf16/--fp16 (empty otherwise): one layer's weights and activations,
  // the vocabulary-sized embedding/output weight, and layer inputs/outputs (ping-pong).
  LayerWeights layer_w32;
  LayerActivations layer_act32;
  TensorView vocab_w32, pos_w32, final_w32, final_b32;
  TensorView x32[2];  // [Nl, h]
};

// Carves every buffer of the stage `g` describes from `activations` and `workspace`; `weights`:
// the stage's parameters (only their shapes are read: param_shapes() serves before they exist).
void carve_stage_buffers(const StageGeometry& g, const GptTensors& weights, Arena& activations, Arena& workspace,
                         StageBuffers& out);

struct StageBufferBytes {
  size_t activations = 0, workspace = 0;  // the tensors' own bytes, as the memory tracker counts them
  size_t activations_reserved = 0, workspace_reserved = 0;  // the arenas' capacities (alignment included)
};
// What the stage `g` describes reserves, by carving it on measuring arenas.
StageBufferBytes measure_stage_buffers(const StageGeometry& g);

}  // namespace mt
