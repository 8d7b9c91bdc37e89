#include "model/stage.h"

#include <algorithm>
#include <utility>

#include "ops/attention.h"
#include "ops/elementwise.h"

namespace mt {

Stage::Stage(const ModelConfig& config, StageRange range, int64_t micro_batch, Backend& backend,
             MemoryTracker* tracker, const StageOptions& options)
    : config_(config),
      local_(config.tp_local()),
      range_(range),
      recompute_(config, range),
      backend_(backend),
      s_(config.seq_length),
      b_(micro_batch) {
  MT_CHECK(micro_batch > 0) << "--micro-batch-size must be positive, got " << micro_batch;
  MT_CHECK(config.kv_channels > 0 && config.num_query_groups > 0 && config.ffn_hidden_size > 0 &&
           config.max_position_embeddings > 0)
      << "a model stage needs a finalized ModelConfig (call ModelConfig::finalize() first)";
  range_.validate(config_);
  MT_CHECK(options.head_chunk_tokens > 0) << "head_chunk_tokens must be positive";
  MT_CHECK(options.slots >= 0) << "a stage needs a nonnegative number of slots, got " << options.slots;
  tp_ = TensorParallel{options.tp_comm, config.sequence_parallel};
  MT_CHECK(tp_.size() == config.tensor_model_parallel_size)
      << "the tensor-parallel group has " << tp_.size() << " ranks but --tensor-model-parallel-size is "
      << config.tensor_model_parallel_size;
  shape_ = {s_, b_, tp_.sp() ? tp_.size() : 1};
  const int threads = options.threads > 0 ? options.threads : backend.max_threads();
  head_chunk_ = std::min(options.head_chunk_tokens, s_ * b_);
  params_ = std::make_unique<ParamStore>(config_, range_, backend, tracker, tp_.rank(), options.ddp);
  slots_.resize(static_cast<size_t>(options.slots));
  // Run the carving once on measuring arenas to learn the exact sizes, then for real.
  Arena measure_act(MemCategory::activations), measure_ws(MemCategory::workspace);
  carve(measure_act, measure_ws, threads);
  activations_ = std::make_unique<Arena>(backend, MemCategory::activations, measure_act.used(), tracker);
  workspace_ = std::make_unique<Arena>(backend, MemCategory::workspace, measure_ws.used(), tracker);
  carve(*activations_, *workspace_, threads);
  activations_->zero_used();
  workspace_->zero_used();
  if (!rope_cos_.empty()) rope_tables(rope_cos_, rope_sin_, config_.rotary_base);
  for (auto* v : {&mask_sb_, &host_dlosses_, &host_losses_}) v->resize(static_cast<size_t>(s_ * b_));
  host_labels_.resize(static_cast<size_t>(s_ * b_));
}

void Stage::carve(Arena& act, Arena& ws, int threads) {
  const int64_t N = s_ * b_, Nl = shape_.local_rows(), h = config_.hidden_size;
  const int64_t V = config_.padded_vocab_size() / tp_.size();
  const DType dtype = config_.params_dtype;
  auto carve_inputs = [&](Inputs& in) {
    if (range_.embedding) in.tokens = ws.alloc(DType::i32, {b_, s_});
    in.positions = ws.alloc(DType::i32, {b_, s_});
    in.doc_start = ws.alloc(DType::i32, {b_, s_});
  };
  // Layers under full recomputation keep only their output; their other activations live in a
  // pool with one entry per layer of a recompute group, refilled by each backward (so all slots
  // share it). Only a group's last output stays (it is the next group's input); inner outputs
  // live in the pool, as in Megatron, which keeps just each group's input.
  std::vector<LayerActivations> pool;
  const int64_t largest_group = slots_.empty() ? 0 : recompute_.largest_group();
  for (int64_t k = 0; k < largest_group; ++k)
    pool.push_back(alloc_layer_activations(act, local_, shape_, dtype, /*with_output=*/k < largest_group - 1));
  // A stage without the head sends its output on right after the forward, and its backward never
  // reads it: one buffer serves every slot (Megatron's deallocate_output_tensor), so in-flight
  // micro-batches do not each keep one.
  const bool shared_output = !range_.head && range_.num_layers() > 0 && !slots_.empty();
  if (shared_output) output_ = act.alloc(dtype, {Nl, h});
  for (Slot& slot : slots_) {
    carve_inputs(slot.in);
    if (range_.embedding) slot.emb_drop_mask = act.alloc(DType::u8, {Nl, h});
    slot.input = act.alloc(dtype, {Nl, h});
    slot.layers.clear();
    for (int64_t i = range_.first_layer; i < range_.last_layer; ++i) {
      const bool sent = shared_output && i + 1 == range_.last_layer;
      const int64_t first = recompute_.group_first(i);
      if (first < 0) {
        slot.layers.push_back(alloc_layer_activations(act, local_, shape_, dtype, /*with_output=*/!sent));
        if (sent) slot.layers.back().out = output_;
        continue;
      }
      LayerActivations layer = pool[static_cast<size_t>(i - first)];
      if (recompute_.group_last(i)) layer.out = sent ? output_ : act.alloc(dtype, {Nl, h});
      slot.layers.push_back(layer);
    }
    if (range_.head) slot.head = alloc_head_saved(act, config_, shape_);
  }
  if (range_.head) {
    losses_ = act.alloc(DType::f32, {N});
    labels_ = ws.alloc(DType::i32, {N});
    dlosses_ = ws.alloc(DType::f32, {N});
  }
  carve_inputs(transient_in_);
  // The output head runs between the last layer's forward and the first layer's backward, so its
  // logits chunk and the layers' scratch are never alive together; the forward-only path never
  // runs a backward, so its transients lie over the backward-only scratch (which is larger, except
  // for the [b, n, s, s] probabilities of --attention-backend unfused).
  ws.overlay({[&] {
                scratch_ = alloc_layer_scratch_fwd(ws, local_, shape_);
                ws.overlay({[&] { alloc_layer_scratch_bwd(ws, scratch_, local_, shape_, threads); },
                            [&] {
                              // No dropout on this path, so no attention-dropout mask.
                              ModelConfig no_dropout = local_;
                              no_dropout.attention_dropout = 0.0f;
                              transient_ = alloc_layer_activations(ws, no_dropout, shape_, DType::f32, false);
                              for (TensorView& x : transient_x_) x = ws.alloc(DType::f32, {Nl, h});
                            }});
              },
              [&] {
                if (range_.head) head_scratch_.logits_chunk = ws.alloc(DType::f32, {head_chunk_, V});
              }});
  if (tp_.sp()) {
    scratch_.sp_gathered = head_scratch_.sp_gathered = ws.alloc(DType::f32, {N, h});
    scratch_.sp_partial = head_scratch_.sp_partial = ws.alloc(DType::f32, {N, h});
  }
  if (range_.head) {
    head_scratch_.final_out = ws.alloc(DType::f32, {Nl, h});
    head_scratch_.lse = ws.alloc(DType::f32, {head_chunk_});
    if (tp_.active())
      for (TensorView* t : {&head_scratch_.ce.row_max, &head_scratch_.ce.sum_exp, &head_scratch_.ce.target})
        *t = ws.alloc(DType::f32, {head_chunk_});
  }
  dx_ = ws.alloc(DType::f32, {Nl, h});
  if (config_.position_embedding_type == PositionEmbedding::rope) {
    rope_cos_ = ws.alloc(DType::f32, {config_.max_position_embeddings, config_.kv_channels / 2});
    rope_sin_ = ws.alloc(DType::f32, {config_.max_position_embeddings, config_.kv_channels / 2});
  }
  if (mixed()) {
    const GptTensors& w = params_->values();
    if (!w.layers.empty()) {
      LayerWeights like_w = w.layers[0];
      const auto src = like_w.all();
      const auto dst = layer_w32_.all();
      for (size_t k = 0; k < src.size(); ++k)
        if (!src[k]->empty()) *dst[k] = ws.alloc(DType::f32, src[k]->shape);
      // The f32 output goes to x32_ (ping-pong), never to this staging. Shapes from a fresh
      // measuring carve (measuring views have a shape but no data).
      Arena shapes(MemCategory::activations);
      LayerActivations like = alloc_layer_activations(shapes, local_, shape_, dtype, false);
      const auto from = like.stored();
      const auto to = layer_act32_.stored();
      for (size_t k = 0; k < from.size(); ++k)
        if (from[k]->ndim() > 0) *to[k] = ws.alloc(DType::f32, from[k]->shape);
    }
    if (range_.embedding || range_.head) vocab_w32_ = ws.alloc(DType::f32, {V, h});
    if (!w.position_embeddings.empty()) pos_w32_ = ws.alloc(DType::f32, w.position_embeddings.shape);
    if (range_.head) {
      final_w32_ = ws.alloc(DType::f32, {h});
      if (!w.final_norm_bias.empty()) final_b32_ = ws.alloc(DType::f32, {h});
    }
    x32_[0] = ws.alloc(DType::f32, {Nl, h});
    x32_[1] = ws.alloc(DType::f32, {Nl, h});
  }
}

std::vector<LedgerEntry> Stage::layer_ledger(int64_t layer) const {
  MT_CHECK(layer >= range_.first_layer && layer < range_.last_layer)
      << "layer " << layer << " is not in this stage's [" << range_.first_layer << ", " << range_.last_layer << ")";
  if (slots_.empty()) return {};
  std::vector<LedgerEntry> ledger = mt::layer_ledger(slots_[0].layers[static_cast<size_t>(layer - range_.first_layer)]);
  if (recompute_.group_first(layer) >= 0)
    for (LedgerEntry& e : ledger)
      if (e.what != "layer output" || !recompute_.group_last(layer)) e.bytes = 0;
  return ledger;
}

bool Stage::slot_busy(int slot) const {
  MT_CHECK(slot >= 0 && slot < slots()) << "slot " << slot << " out of [0, " << slots() << ")";
  return slots_[static_cast<size_t>(slot)].busy;
}

Stage::Slot& Stage::slot_at(int slot, const char* op) {
  MT_CHECK(slot >= 0 && slot < slots()) << op << ": slot " << slot << " out of [0, " << slots()
                                        << ") (the stage was built with " << slots() << " slots)";
  return slots_[static_cast<size_t>(slot)];
}

TensorView Stage::as_f32(const TensorView& t, const TensorView& staging) {
  if (t.empty() || t.dtype == DType::f32) return t;
  cast(staging, t);
  return staging;
}

LayerWeights Stage::layer_weights_f32(int64_t layer) {
  LayerWeights w = params_->values().layers[local(layer)];
  if (!mixed()) return w;
  LayerWeights out;
  const auto src = w.all();
  const auto staging = layer_w32_.all();
  const auto dst = out.all();
  for (size_t k = 0; k < src.size(); ++k) *dst[k] = as_f32(*src[k], *staging[k]);
  return out;
}

LayerActivations Stage::layer_activations_f32(const LayerActivations& saved, bool load) {
  if (!mixed()) return saved;
  LayerActivations f = saved, copy = saved;
  const auto src = copy.stored();
  const auto staging = layer_act32_.stored();
  const auto dst = f.stored();
  // Not the output: the backward never reads it and the forward writes it to x32_.
  for (size_t k = 0; k < src.size(); ++k)
    if (k != LayerActivations::kStoredOut) *dst[k] = load ? as_f32(*src[k], *staging[k]) : *staging[k];
  return f;
}

EmbeddingWeights Stage::embedding_weights_f32() {
  const GptTensors& w = params_->values();
  return {as_f32(w.word_embeddings, vocab_w32_), as_f32(w.position_embeddings, pos_w32_)};
}

HeadWeights Stage::head_weights_f32() {
  const GptTensors& w = params_->values();
  return {final_norm_f32(), as_f32(w.output_weight, vocab_w32_)};
}

HeadWeights Stage::head_grads() const {
  const GptTensors& g = params_->grads();
  return {{g.final_norm_weight, g.final_norm_bias}, g.output_weight};
}

NormWeights Stage::final_norm_f32() {
  const GptTensors& w = params_->values();
  return {as_f32(w.final_norm_weight, final_w32_), as_f32(w.final_norm_bias, final_b32_)};
}

VocabShard Stage::vocab_shard() const {
  const int64_t rows = config_.padded_vocab_size() / tp_.size();
  return {tp_.rank() * rows, config_.padded_vocab_size()};
}

LayerContext Stage::context(const Inputs& in, uint64_t round, bool dropout, int64_t layer) const {
  LayerContext ctx;
  ctx.config = &local_;
  ctx.shape = shape_;
  ctx.tp = tp_;
  ctx.total_heads = config_.num_attention_heads;
  ctx.rope_cos = rope_cos_;
  ctx.rope_sin = rope_sin_;
  ctx.positions = in.has_positions ? in.positions : TensorView();
  ctx.key_start = in.has_doc_start ? in.doc_start : TensorView();
  ctx.seed = seed_;
  ctx.dropout_round = round;
  ctx.dropout = dropout;
  ctx.layer_index = layer;
  ctx.act_dtype = config_.params_dtype;
  return ctx;
}

void Stage::load_inputs(Inputs& in, const MicroBatch& batch, const char* op) {
  auto check = [&](const TensorView& t, const char* name, DType dtype) {
    check_shape(t, {b_, s_}, op, name);
    check_dtype(t, dtype, op, name);
    MT_CHECK(t.device == Device::cpu) << op << ": the micro-batch's " << name << " must be in host memory";
  };
  if (range_.embedding) {
    check(batch.tokens, "tokens", DType::i32);
    backend_.copy_from_host(in.tokens.data, batch.tokens.data, batch.tokens.bytes());
  }
  in.has_positions = !batch.position_ids.empty();
  in.has_doc_start = !batch.document_start.empty();
  if (in.has_positions) {
    check(batch.position_ids, "position_ids", DType::i32);
    backend_.copy_from_host(in.positions.data, batch.position_ids.data, batch.position_ids.bytes());
  }
  if (in.has_doc_start) {
    check(batch.document_start, "document_start", DType::i32);
    backend_.copy_from_host(in.doc_start.data, batch.document_start.data, batch.document_start.bytes());
  }
}

double Stage::load_labels(const MicroBatch& batch, float grad_scale, const char* op) {
  check_shape(batch.labels, {b_, s_}, op, "labels");
  check_dtype(batch.labels, DType::i32, op, "labels");
  MT_CHECK(batch.labels.device == Device::cpu && batch.loss_mask.device == Device::cpu)
      << op << ": the micro-batch must be in host memory";
  if (!batch.loss_mask.empty()) {
    check_shape(batch.loss_mask, {b_, s_}, op, "loss_mask");
    check_dtype(batch.loss_mask, DType::f32, op, "loss_mask");
  }
  double num_tokens = 0.0;
  for (int64_t j = 0; j < b_; ++j)
    for (int64_t i = 0; i < s_; ++i) {
      const int32_t label = batch.labels.i32()[j * s_ + i];
      // Checked here, identically on every rank: under tensor parallelism no single shard of the
      // cross entropy sees the whole vocabulary, so none of them could tell.
      MT_CHECK(label >= 0 && label < config_.padded_vocab_size())
          << op << ": labels[" << j << ", " << i << "] = " << label << " is out of range [0, "
          << config_.padded_vocab_size() << ") (the padded vocabulary)";
      host_labels_[i * b_ + j] = label;
      const float m = batch.loss_mask.empty() ? 1.0f : batch.loss_mask.f32()[j * s_ + i];
      mask_sb_[i * b_ + j] = m;
      host_dlosses_[i * b_ + j] = m * grad_scale;
      num_tokens += m;
    }
  backend_.copy_from_host(labels_.data, host_labels_.data(), labels_.bytes());
  backend_.copy_from_host(dlosses_.data, host_dlosses_.data(), dlosses_.bytes());
  return num_tokens;
}

LossSums Stage::loss_sums(double num_tokens) {
  LossSums sums;
  sums.num_tokens = num_tokens;
  backend_.copy_to_host(host_losses_.data(), losses_.data, losses_.bytes());
  for (size_t n = 0; n < host_losses_.size(); ++n) sums.loss_sum += static_cast<double>(mask_sb_[n]) * host_losses_[n];
  return sums;
}

void Stage::receive(const TensorView& input, const TensorView& dst, const char* op) {
  check_shape(input, dst.shape, op, "input");
  MT_CHECK(input.dtype == DType::f32 || input.dtype == config_.params_dtype)
      << op << ": input hidden states must be f32 or " << dtype_name(config_.params_dtype) << ", got " << input.str();
  if (input.dtype == dst.dtype)
    copy_tensor(dst, input);
  else
    cast(dst, input);
}

TensorView Stage::layer_input_f32(const Slot& slot, int64_t layer, const TensorView& staging) {
  return as_f32(layer == range_.first_layer ? slot.input : slot.layers[local(layer) - 1].out, staging);
}

TensorView Stage::layer_fwd(Slot& slot, int64_t layer, const TensorView& x, bool dropout, bool with_output) {
  const LayerActivations& saved = slot.layers[static_cast<size_t>(local(layer))];
  LayerActivations act = layer_activations_f32(saved, false);
  if (mixed()) act.out = x32_[(local(layer) + 1) % 2];  // ping-pong with the input, which stays valid
  transformer_layer_fwd(context(slot.in, slot.round, dropout, layer), layer_weights_f32(layer), x, act, scratch_,
                        with_output);
  if (mixed()) {
    LayerActivations stored = saved;  // views of the slot's tensors
    const auto src = act.stored();
    const auto dst = stored.stored();
    for (size_t k = 0; k < src.size(); ++k)
      if ((with_output || k != LayerActivations::kStoredOut) && !dst[k]->empty()) cast(*dst[k], *src[k]);
  }
  return with_output ? act.out : TensorView();
}

StageForward Stage::forward(int slot_index, const MicroBatch& batch, const TensorView& input,
                            const ForwardOptions& options) {
  const char* op = "Stage::forward";
  Slot& slot = slot_at(slot_index, op);
  // Reusing a slot before its backward would overwrite the activations that backward needs.
  MT_CHECK(!slot.busy) << op << ": slot " << slot_index
                       << " holds a micro-batch whose backward() has not run yet; use another slot";
  const bool train = options.grad_scale != 0.0f;
  double num_tokens = 0.0;
  if (range_.head) num_tokens = load_labels(batch, options.grad_scale, op);
  load_inputs(slot.in, batch, op);
  slot.round = options.dropout_round;
  slot.dropout = options.dropout;
  const int64_t first = range_.first_layer;
  const LayerContext ctx = context(slot.in, slot.round, options.dropout, first - 1);
  TensorView x = mixed() ? x32_[0] : slot.input;
  if (range_.embedding) {
    MT_CHECK(input.empty()) << op << ": the first stage embeds the tokens; it takes no input hidden states";
    need(params_->embedding_params());
    embedding_block_fwd(ctx, embedding_weights_f32(), vocab_shard(), {slot.in.tokens, ctx.positions}, x,
                        slot.emb_drop_mask, scratch_.dense, scratch_.sp_partial);
    if (mixed()) cast(slot.input, x);
  } else {
    receive(input, slot.input, op);
    x = as_f32(slot.input, x);
  }
  for (int64_t i = first; i < range_.last_layer; ++i) {
    need(params_->layer_params(i));
    x = layer_fwd(slot, i, x, options.dropout);
  }
  StageForward result;
  if (range_.head) {
    need(params_->head_params());
    output_head_fwd(ctx, head_weights_f32(), head_grads(), vocab_shard().start, x, slot.head, head_scratch_,
                    {labels_, losses_, dlosses_, TensorView(), options.grad_scale});
    result.loss = loss_sums(num_tokens);
  } else {
    result.hidden = range_.num_layers() > 0 ? slot.layers.back().out : slot.input;
  }
  slot.busy = train;
  return result;
}

TensorView Stage::backward(int slot_index, const TensorView& output_grad) {
  const char* op = "Stage::backward";
  Slot& slot = slot_at(slot_index, op);
  MT_CHECK(slot.busy) << op << ": slot " << slot_index << " has no training forward (one with a nonzero grad_scale) "
                      << "waiting for its backward";
  const GptTensors& g = params_->grads();
  const int64_t first = range_.first_layer, last = range_.last_layer;
  if (range_.head) {
    MT_CHECK(output_grad.empty()) << op << ": the last stage's loss ends the graph; it takes no output gradient";
    const TensorView x = last > first ? slot.layers.back().out : slot.input;
    output_head_bwd(context(slot.in, slot.round, slot.dropout, last), final_norm_f32(), head_grads().final_norm,
                    as_f32(x, x32_[1]), slot.head, dx_);
    if (grads_ready_) grads_ready_(params_->head_params());
  } else {
    check_shape(output_grad, dx_.shape, op, "output_grad");
    check_dtype(output_grad, DType::f32, op, "output_grad");
    copy_tensor(dx_, output_grad);
  }
  const bool dropout = slot.dropout;  // as in the forward
  for (int64_t i = last - 1; i >= first; --i) {
    if (recompute_.group_last(i)) {
      // Rerun the group's forward from its saved input: same weights, same dropout masks. The
      // last layer's output is saved, so its rerun stops short of fc2.
      const int64_t g0 = recompute_.group_first(i);
      TensorView x = layer_input_f32(slot, g0, x32_[local(g0) % 2]);
      for (int64_t j = g0; j <= i; ++j) x = layer_fwd(slot, j, x, dropout, /*with_output=*/j < i);
    }
    const TensorView x = layer_input_f32(slot, i, x32_[0]);
    transformer_layer_bwd(context(slot.in, slot.round, dropout, i), layer_weights_f32(i), g.layers[local(i)], x,
                          layer_activations_f32(slot.layers[local(i)], true), scratch_, dx_);
    if (grads_ready_) grads_ready_(params_->layer_params(i));
  }
  slot.busy = false;
  if (!range_.embedding) return dx_;
  const LayerContext ctx = context(slot.in, slot.round, dropout, first - 1);
  embedding_block_bwd(ctx, {g.word_embeddings, g.position_embeddings}, vocab_shard(), {slot.in.tokens, ctx.positions},
                      dx_, slot.emb_drop_mask, scratch_.dense, scratch_.sp_gathered);
  if (grads_ready_) grads_ready_(params_->embedding_params());
  return TensorView();
}

StageForward Stage::forward_only(const MicroBatch& batch, const TensorView& input, const TensorView& logits) {
  const char* op = "Stage::forward_only";
  const bool with_loss = range_.head && !batch.labels.empty();
  if (!logits.empty()) {
    MT_CHECK(range_.head) << op << ": only the last stage makes logits";
    check_shape(logits, {s_ * b_, config_.padded_vocab_size() / tp_.size()}, op, "logits");
    check_dtype(logits, DType::f32, op, "logits");
  }
  double num_tokens = 0.0;
  if (with_loss) num_tokens = load_labels(batch, 0.0f, op);
  load_inputs(transient_in_, batch, op);
  const int64_t first = range_.first_layer;
  const LayerContext ctx = context(transient_in_, 0, /*dropout=*/false, first - 1);
  TensorView x = transient_x_[0];
  if (range_.embedding) {
    MT_CHECK(input.empty()) << op << ": the first stage embeds the tokens; it takes no input hidden states";
    need(params_->embedding_params());
    embedding_block_fwd(ctx, embedding_weights_f32(), vocab_shard(), {transient_in_.tokens, ctx.positions}, x,
                        transient_.attn_drop_mask, scratch_.dense, scratch_.sp_partial);
  } else {
    receive(input, x, op);
    round_to_dtype(x, config_.params_dtype);  // as the training forward's copy in the activation dtype
  }
  for (int64_t i = first; i < range_.last_layer; ++i) {
    need(params_->layer_params(i));
    LayerActivations act = transient_;
    act.out = transient_x_[(local(i) + 1) % 2];
    transformer_layer_fwd(context(transient_in_, 0, false, i), layer_weights_f32(i), x, act, scratch_);
    x = act.out;
  }
  StageForward result;
  if (!range_.head) {
    result.hidden = x;
    return result;
  }
  need(params_->head_params());
  // The head's saved tensors are not needed: the final-norm statistics go to the transient.
  HeadSaved head;
  head.final_norm = transient_.norm1;
  output_head_fwd(ctx, head_weights_f32(), head_grads(), vocab_shard().start, x, head, head_scratch_,
                  {with_loss ? labels_ : TensorView(), losses_, dlosses_, logits, 0.0f});
  if (with_loss) result.loss = loss_sums(num_tokens);
  return result;
}

}  // namespace mt
