#include "model/stage_buffers.h"

#include <algorithm>

#include "model/recompute.h"

namespace mt {

void carve_stage_buffers(const StageGeometry& g, const GptTensors& weights, Arena& act, Arena& ws, StageBuffers& out) {
  const ModelConfig& config = g.config;
  const ModelConfig local = config.tp_local();
  const StageRange& range = g.range;
  const int64_t t = config.tensor_model_parallel_size;
  const bool sp = config.sequence_parallel && t > 1;
  const int64_t s = config.local_seq_length();  // this context-parallel rank's tokens of a sequence
  const LayerShape shape{s, g.micro_batch, sp ? t : 1};
  const RecomputePlan recompute(config, range);
  const int64_t N = shape.rows(), Nl = shape.local_rows(), h = config.hidden_size;
  const int64_t V = config.padded_vocab_size() / t;
  const int64_t head_chunk = std::min(g.head_chunk_tokens, N);
  const DType dtype = config.params_dtype;
  out.slots.assign(static_cast<size_t>(g.slots), StageSlot{});
  auto carve_inputs = [&](StageInputs& in) {
    if (range.embedding) in.tokens = ws.alloc(DType::i32, {g.micro_batch, s});
    in.positions = ws.alloc(DType::i32, {g.micro_batch, s});
    in.doc_start = ws.alloc(DType::i32, {g.micro_batch, s});
  };
  // Layers under full recomputation keep only their output; their other activations live in a
  // pool with one entry per layer of a recompute group, refilled by each backward (so all slots
  // share it). Only a group's last output stays (it is the next group's input); inner outputs
  // live in the pool, as in Megatron, which keeps just each group's input.
  // A pool entry serves the k-th layer of every group, so the MLP kinds of all of them.
  std::vector<LayerActivations> pool;
  const int64_t largest_group = g.slots == 0 ? 0 : recompute.largest_group();
  const std::vector<MlpKinds> pool_kinds = recompute.pool_kinds(config);
  for (int64_t k = 0; k < largest_group; ++k)
    pool.push_back(alloc_layer_activations(act, local, shape, dtype, pool_kinds[static_cast<size_t>(k)],
                                           /*with_output=*/k < largest_group - 1));
  const MlpKinds stage_kinds = config.mlp_kinds(range.first_layer, range.last_layer);
  // A stage without the head sends its output on right after the forward, and its backward never
  // reads it: one buffer serves every slot (Megatron's deallocate_output_tensor), so in-flight
  // micro-batches do not each keep one.
  const bool shared_output = !range.head && range.num_layers() > 0 && g.slots > 0;
  if (shared_output) out.output = act.alloc(dtype, {Nl, h});
  for (StageSlot& slot : out.slots) {
    carve_inputs(slot.in);
    if (range.embedding && config.hidden_dropout > 0.0f) slot.emb_drop_mask = act.alloc(DType::u8, {Nl, h});
    slot.input = act.alloc(dtype, {Nl, h});
    for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
      const bool sent = shared_output && i + 1 == range.last_layer;
      const int64_t first = recompute.group_first(i);
      if (first < 0) {
        slot.layers.push_back(
            alloc_layer_activations(act, local, shape, dtype, config.mlp_kinds(i, i + 1), /*with_output=*/!sent));
        if (sent) slot.layers.back().out = out.output;
        continue;
      }
      LayerActivations layer = pool[static_cast<size_t>(i - first)];
      if (recompute.group_last(i)) layer.out = sent ? out.output : act.alloc(dtype, {Nl, h});
      slot.layers.push_back(layer);
    }
    if (range.head) slot.head = alloc_head_saved(act, config, shape);
  }
  if (range.head) {
    out.losses = act.alloc(DType::f32, {N});
    out.labels = ws.alloc(DType::i32, {N});
    out.dlosses = ws.alloc(DType::f32, {N});
  }
  carve_inputs(out.transient_in);
  // The output head runs between the last layer's forward and the first layer's backward, so its
  // logits chunk and the layers' scratch are never alive together; the forward-only path never
  // runs a backward, so its transients lie over the backward-only scratch (which is larger, except
  // for the [b, n, s, s] probabilities of --attention-backend unfused).
  ws.overlay({[&] {
                out.scratch = alloc_layer_scratch_fwd(ws, local, shape, stage_kinds, g.target);
                ws.overlay({[&] { alloc_layer_scratch_bwd(ws, out.scratch, local, shape, g.target, stage_kinds); },
                            [&] {
                              // No dropout on this path, so no attention-dropout mask.
                              ModelConfig no_dropout = local;
                              no_dropout.attention_dropout = 0.0f;
                              out.transient =
                                  alloc_layer_activations(ws, no_dropout, shape, DType::f32, stage_kinds, false);
                              for (TensorView& x : out.transient_x) x = ws.alloc(DType::f32, {Nl, h});
                            }});
              },
              [&] {
                if (range.head) out.head_scratch.logits_chunk = ws.alloc(DType::f32, {head_chunk, V});
              }});
  if (sp) {
    out.scratch.sp_gathered = out.head_scratch.sp_gathered = ws.alloc(DType::f32, {N, h});
    out.scratch.sp_partial = out.head_scratch.sp_partial = ws.alloc(DType::f32, {N, h});
  }
  if (range.head) {
    out.head_scratch.final_out = ws.alloc(DType::f32, {Nl, h});
    out.head_scratch.lse = ws.alloc(DType::f32, {head_chunk});
    if (t > 1)
      for (TensorView* x : {&out.head_scratch.ce.row_max, &out.head_scratch.ce.sum_exp, &out.head_scratch.ce.target})
        *x = ws.alloc(DType::f32, {head_chunk});
  }
  out.dx = ws.alloc(DType::f32, {Nl, h});
  if (config.position_embedding_type == PositionEmbedding::rope) {
    out.rope_cos = ws.alloc(DType::f32, {config.max_position_embeddings, config.rope_table_width()});
    out.rope_sin = ws.alloc(DType::f32, {config.max_position_embeddings, config.rope_table_width()});
  }
  if (dtype == DType::f32) return;
  if (!weights.layers.empty()) {
    // Every weight a layer of the stage has (dense and MoE layers have different ones).
    const auto dst = out.layer_w32.all();
    for (LayerWeights like_w : weights.layers) {
      const auto src = like_w.all();
      for (size_t k = 0; k < src.size(); ++k)
        if (src[k]->ndim() > 0 && dst[k]->ndim() == 0) *dst[k] = ws.alloc(DType::f32, src[k]->shape);
    }
    // The f32 output goes to x32 (ping-pong), never to this staging. Shapes from a fresh
    // measuring carve. (Shapes, not data, tell what exists: measuring views have no data.)
    Arena shapes(MemCategory::activations);
    LayerActivations like = alloc_layer_activations(shapes, local, shape, dtype, stage_kinds, false);
    const auto from = like.stored();
    const auto to = out.layer_act32.stored();
    for (size_t k = 0; k < from.size(); ++k)
      if (from[k]->ndim() > 0) *to[k] = ws.alloc(DType::f32, from[k]->shape);
  }
  if (range.embedding || range.head) out.vocab_w32 = ws.alloc(DType::f32, {V, h});
  if (weights.position_embeddings.ndim() > 0) out.pos_w32 = ws.alloc(DType::f32, weights.position_embeddings.shape);
  if (range.head) {
    out.final_w32 = ws.alloc(DType::f32, {h});
    if (weights.final_norm_bias.ndim() > 0) out.final_b32 = ws.alloc(DType::f32, {h});
  }
  out.x32[0] = ws.alloc(DType::f32, {Nl, h});
  out.x32[1] = ws.alloc(DType::f32, {Nl, h});
}

StageBufferBytes measure_stage_buffers(const StageGeometry& g) {
  Arena activations(MemCategory::activations), workspace(MemCategory::workspace);
  StageBuffers buffers;
  carve_stage_buffers(g, param_shapes(g.config, g.range, shard_sizes(g.config)), activations, workspace, buffers);
  return {activations.requested(), workspace.requested(), activations.used(), workspace.used()};
}

}  // namespace mt
