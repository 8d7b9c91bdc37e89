#include "model/stage.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/moe_router.h"

namespace mt {

Stage::Stage(const ModelConfig& config, StageRange range, int64_t micro_batch, Backend& backend,
             MemoryTracker* tracker, const StageOptions& options)
    : config_(config),
      local_(config.tp_local()),
      range_(range),
      recompute_(config, range),
      backend_(backend),
      s_(config.local_seq_length()),
      b_(micro_batch),
      seq_length_(config.seq_length) {
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
  cp_ = ContextParallel{options.cp_comm, config.cp_comm_type};
  MT_CHECK(cp_.size() == config.context_parallel_size)
      << "the context-parallel group has " << cp_.size() << " ranks but --context-parallel-size is "
      << config.context_parallel_size;
  cp_rows_ = cp_.rows(s_);
  shape_ = {s_, b_, tp_.sp() ? tp_.size() : 1};
  const WorkspaceTarget target{backend.device(), options.threads > 0 ? options.threads : backend.max_threads()};
  ShardRanks ranks = shard_sizes(config_);
  ranks.tp_rank = tp_.rank();
  if (config_.moe.enabled()) {  // a dense model has no use for the expert groups
    for (auto [comm, size, rank] : {std::tuple{options.ep_comm, &ranks.ep, &ranks.ep_rank},
                                    std::tuple{options.etp_comm, &ranks.etp, &ranks.etp_rank}}) {
      MT_CHECK((comm ? comm->size() : 1) == *size)
          << "an expert group has " << (comm ? comm->size() : 1) << " ranks but the config says " << *size
          << " (--expert-model-parallel-size, --expert-tensor-parallel-size)";
      *rank = comm ? comm->rank() : 0;
    }
    experts_ = ExpertParallel{options.ep_comm, options.etp_comm, options.etp_ep_comm};
  }
  dp_ = options.dp_comm;
  const bool experts = config_.mlp_kinds(range_.first_layer, range_.last_layer).moe;
  params_ = std::make_unique<ParamStore>(config_, range_, backend, tracker, ranks, options.ddp,
                                         experts ? ParamSet::dense : ParamSet::all);
  if (experts)
    expert_params_ = std::make_unique<ParamStore>(config_, range_, backend, tracker, ranks,
                                                  expert_ddp(config_, options.ddp), ParamSet::experts);
  for (const bool grads : {false, true})
    (grads ? grads_ : values_) = gpt_tensors(config_, range_, [&](const std::string& name) {
      for (ParamStore* store : param_stores())
        for (const Param& p : store->params())
          if (p.name == name) return grads ? p.grad : p.value;
      return TensorView();
    });
  if (config_.moe.expert_bias) carve_expert_biases(backend, tracker);
  // Carve once on measuring arenas to learn the exact sizes, then for real.
  const StageGeometry geometry{config_, range_, b_, options.slots, target, options.head_chunk_tokens};
  const StageBufferBytes bytes = measure_stage_buffers(geometry);
  activations_ = std::make_unique<Arena>(backend, MemCategory::activations, bytes.activations_reserved, tracker);
  workspace_ = std::make_unique<Arena>(backend, MemCategory::workspace, bytes.workspace_reserved, tracker);
  carve_stage_buffers(geometry, values_, *activations_, *workspace_, buf_);
  activations_->zero_used();
  workspace_->zero_used();
  if (!buf_.rope_cos.empty()) rope_tables(buf_.rope_cos, buf_.rope_sin, config_.rotary_base, config_.rotary_dim());
  for (auto* v : {&mask_sb_, &host_dlosses_, &host_losses_}) v->resize(static_cast<size_t>(s_ * b_));
  moe_stats_.resize(static_cast<size_t>(range_.num_layers()));
  for (int64_t i = range_.first_layer; i < range_.last_layer; ++i)
    if (config_.mlp_kind(i) == MlpKind::moe)
      for (auto* v : {&moe_stats_[static_cast<size_t>(local(i))].tokens_per_expert,
                      &moe_stats_[static_cast<size_t>(local(i))].global_counts})
        v->resize(static_cast<size_t>(config_.moe.num_experts));
  host_labels_.resize(static_cast<size_t>(s_ * b_));
  host_ids_.resize(static_cast<size_t>(s_ * b_));
}

std::vector<ParamStore*> Stage::param_stores() {
  std::vector<ParamStore*> stores{params_.get()};
  if (expert_params_) stores.push_back(expert_params_.get());
  return stores;
}

Param& Stage::param(const std::string& name) {
  if (expert_params_)
    for (Param& p : expert_params_->params())
      if (p.name == name) return p;
  return params_->get(name);
}

void Stage::init_params(uint64_t seed) {
  for (ParamStore* store : param_stores()) store->init(seed);
  if (state_) state_->zero_used();
}

void Stage::carve_expert_biases(Backend& backend, MemoryTracker* tracker) {
  const int64_t E = config_.moe.num_experts;
  const size_t bytes = (4 * static_cast<size_t>(E) + Arena::kAlign - 1) / Arena::kAlign * Arena::kAlign;
  for (int64_t i = range_.first_layer; i < range_.last_layer; ++i)
    if (config_.mlp_kind(i) == MlpKind::moe) bias_layers_.push_back(i);
  state_ = std::make_unique<Arena>(backend, MemCategory::weights, bias_layers_.size() * bytes, tracker);
  for (const int64_t i : bias_layers_) {
    const TensorView bias = state_->alloc(DType::f32, {E});
    values_.layers[static_cast<size_t>(local(i))].moe.expert_bias = bias;
    expert_biases_.emplace_back(expert_bias_name(i), bias);
  }
  state_->zero_used();
  host_counts_.resize(static_cast<size_t>(E));
  // The update reads the counts on the biases' device (workspace: dead between updates).
  bias_counts_arena_ = std::make_unique<Arena>(backend, MemCategory::workspace, bytes, tracker);
  bias_counts_ = bias_counts_arena_->alloc(DType::f32, {E});
}

void Stage::update_expert_biases(const std::vector<double>& tokens_per_expert) {
  const int64_t E = config_.moe.num_experts;
  MT_CHECK(static_cast<int64_t>(tokens_per_expert.size()) == config_.num_layers * E)
      << "expert-bias update: " << tokens_per_expert.size() << " counts for " << config_.num_layers << " layers of " << E
      << " experts";
  for (size_t k = 0; k < bias_layers_.size(); ++k) {
    const int64_t layer = bias_layers_[k];
    const TensorView& bias = expert_biases_[k].second;
    for (int64_t e = 0; e < E; ++e)
      host_counts_[static_cast<size_t>(e)] = static_cast<float>(tokens_per_expert[static_cast<size_t>(layer * E + e)]);
    backend_.copy_from_host(bias_counts_.data, host_counts_.data(), bias_counts_.bytes());
    moe_expert_bias_update(bias, bias_counts_, config_.moe.bias_update_rate);
  }
}

void Stage::zero_grads() {
  for (ParamStore* store : param_stores()) store->zero_grads();
}

void Stage::reset_moe_stats() {
  for (MoeLayerStats& stats : moe_stats_) stats.reset();
}

std::vector<LedgerEntry> Stage::layer_ledger(int64_t layer) const {
  MT_CHECK(layer >= range_.first_layer && layer < range_.last_layer)
      << "layer " << layer << " is not in this stage's [" << range_.first_layer << ", " << range_.last_layer << ")";
  if (buf_.slots.empty()) return {};
  std::vector<LedgerEntry> ledger = mt::layer_ledger(buf_.slots[0].layers[static_cast<size_t>(layer - range_.first_layer)]);
  if (recompute_.group_first(layer) >= 0)
    for (LedgerEntry& e : ledger)
      if (e.what != "layer output" || !recompute_.group_last(layer)) e.bytes = 0;
  return ledger;
}

bool Stage::slot_busy(int slot) const {
  MT_CHECK(slot >= 0 && slot < slots()) << "slot " << slot << " out of [0, " << slots() << ")";
  return buf_.slots[static_cast<size_t>(slot)].busy;
}

StageSlot& Stage::slot_at(int slot, const char* op) {
  MT_CHECK(slot >= 0 && slot < slots()) << op << ": slot " << slot << " out of [0, " << slots()
                                        << ") (the stage was built with " << slots() << " slots)";
  return buf_.slots[static_cast<size_t>(slot)];
}

TensorView Stage::as_f32(const TensorView& t, const TensorView& staging) {
  if (t.empty() || t.dtype == DType::f32) return t;
  cast(staging, t);
  return staging;
}

LayerWeights Stage::layer_weights_f32(int64_t layer) {
  LayerWeights w = values_.layers[local(layer)];
  if (!mixed()) return w;
  LayerWeights out;
  out.moe.expert_bias = w.moe.expert_bias;  // f32 already
  const auto src = w.all();
  const auto staging = buf_.layer_w32.all();
  const auto dst = out.all();
  for (size_t k = 0; k < src.size(); ++k) *dst[k] = as_f32(*src[k], *staging[k]);
  return out;
}

LayerActivations Stage::layer_activations_f32(const LayerActivations& saved, bool load) {
  if (!mixed()) return saved;
  LayerActivations f = saved, copy = saved;
  const auto src = copy.stored();
  const auto staging = buf_.layer_act32.stored();
  const auto dst = f.stored();
  // Not the output: the backward never reads it and the forward writes it to buf_.x32.
  for (size_t k = 0; k < src.size(); ++k)
    if (k != LayerActivations::kStoredOut) *dst[k] = load ? as_f32(*src[k], *staging[k]) : *staging[k];
  return f;
}

EmbeddingWeights Stage::embedding_weights_f32() {
  const GptTensors& w = values_;
  return {as_f32(w.word_embeddings, buf_.vocab_w32), as_f32(w.position_embeddings, buf_.pos_w32)};
}

HeadWeights Stage::head_weights_f32() {
  const GptTensors& w = values_;
  return {final_norm_f32(), as_f32(w.output_weight, buf_.vocab_w32)};
}

HeadWeights Stage::head_grads() const {
  const GptTensors& g = grads_;
  return {{g.final_norm_weight, g.final_norm_bias}, g.output_weight};
}

NormWeights Stage::final_norm_f32() {
  const GptTensors& w = values_;
  return {as_f32(w.final_norm_weight, buf_.final_w32), as_f32(w.final_norm_bias, buf_.final_b32)};
}

VocabShard Stage::vocab_shard() const {
  const int64_t rows = config_.padded_vocab_size() / tp_.size();
  return {tp_.rank() * rows, config_.padded_vocab_size()};
}

LayerContext Stage::context(const StageInputs& in, uint64_t first_sample, bool dropout, int64_t layer) const {
  LayerContext ctx;
  ctx.config = &local_;
  ctx.shape = shape_;
  ctx.tp = tp_;
  ctx.cp = cp_;
  ctx.experts = experts_;
  ctx.dp = dp_;
  ctx.total_heads = config_.num_attention_heads;
  ctx.rope_cos = buf_.rope_cos;
  ctx.rope_sin = buf_.rope_sin;
  ctx.positions = in.has_positions ? in.positions : TensorView();
  ctx.key_start = in.has_doc_start ? in.doc_start : TensorView();
  ctx.seed = seed_;
  ctx.first_sample = first_sample;
  ctx.dropout = dropout;
  ctx.layer_index = layer;
  ctx.act_dtype = config_.params_dtype;
  return ctx;
}

const int32_t* Stage::local_ids(const TensorView& t, const char* name, const char* op) {
  check_shape(t, {b_, seq_length_}, op, name);
  check_dtype(t, DType::i32, op, name);
  MT_CHECK(t.device == Device::cpu) << op << ": the micro-batch's " << name << " must be in host memory";
  if (!cp_.active()) return t.i32();
  for (int64_t j = 0; j < b_; ++j)
    for (int64_t i = 0; i < s_; ++i) host_ids_[j * s_ + i] = t.i32()[j * seq_length_ + global_position(i)];
  return host_ids_.data();
}

void Stage::load_inputs(StageInputs& in, const MicroBatch& batch, const char* op) {
  const size_t bytes = static_cast<size_t>(b_ * s_) * sizeof(int32_t);
  if (range_.embedding) backend_.copy_from_host(in.tokens.data, local_ids(batch.tokens, "tokens", op), bytes);
  in.has_doc_start = !batch.document_start.empty();
  MT_CHECK(!in.has_doc_start || !cp_.active())
      << op << ": document masks (--reset-attention-mask) are not supported with --context-parallel-size "
      << cp_.size();
  if (in.has_doc_start)
    backend_.copy_from_host(in.doc_start.data, local_ids(batch.document_start, "document_start", op), bytes);
  // Under context parallelism every token needs its whole-sequence position (RoPE, the learned
  // table), so the positions are always given.
  in.has_positions = !batch.position_ids.empty() || cp_.active();
  if (!batch.position_ids.empty()) {
    backend_.copy_from_host(in.positions.data, local_ids(batch.position_ids, "position_ids", op), bytes);
  } else if (in.has_positions) {
    for (int64_t j = 0; j < b_; ++j)
      for (int64_t i = 0; i < s_; ++i) host_ids_[j * s_ + i] = static_cast<int32_t>(global_position(i));
    backend_.copy_from_host(in.positions.data, host_ids_.data(), bytes);
  }
}

double Stage::load_labels(const MicroBatch& batch, float grad_scale, const char* op) {
  MT_CHECK(batch.labels.device == Device::cpu && batch.loss_mask.device == Device::cpu)
      << op << ": the micro-batch must be in host memory";
  if (!batch.loss_mask.empty()) {
    check_shape(batch.loss_mask, {b_, seq_length_}, op, "loss_mask");
    check_dtype(batch.loss_mask, DType::f32, op, "loss_mask");
  }
  const int32_t* labels = local_ids(batch.labels, "labels", op);
  double num_tokens = 0.0;
  for (int64_t j = 0; j < b_; ++j)
    for (int64_t i = 0; i < s_; ++i) {
      const int32_t label = labels[j * s_ + i];
      // Checked here, identically on every rank: under tensor parallelism no single shard of the
      // cross entropy sees the whole vocabulary, so none of them could tell.
      MT_CHECK(label >= 0 && label < config_.padded_vocab_size())
          << op << ": labels[" << j << ", " << global_position(i) << "] = " << label << " is out of range [0, "
          << config_.padded_vocab_size() << ") (the padded vocabulary)";
      host_labels_[i * b_ + j] = label;
      const float m = batch.loss_mask.empty() ? 1.0f : batch.loss_mask.f32()[j * seq_length_ + global_position(i)];
      mask_sb_[i * b_ + j] = m;
      host_dlosses_[i * b_ + j] = m * grad_scale;
      num_tokens += m;
    }
  backend_.copy_from_host(buf_.labels.data, host_labels_.data(), buf_.labels.bytes());
  backend_.copy_from_host(buf_.dlosses.data, host_dlosses_.data(), buf_.dlosses.bytes());
  return num_tokens;
}

LossSums Stage::loss_sums(double num_tokens) {
  LossSums sums;
  sums.num_tokens = num_tokens;
  backend_.copy_to_host(host_losses_.data(), buf_.losses.data, buf_.losses.bytes());
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

TensorView Stage::layer_input_f32(const StageSlot& slot, int64_t layer, const TensorView& staging) {
  return as_f32(layer == range_.first_layer ? slot.input : slot.layers[local(layer) - 1].out, staging);
}

TensorView Stage::layer_fwd(StageSlot& slot, int64_t layer, const TensorView& x, bool dropout, bool record,
                            bool with_output) {
  const LayerActivations& saved = slot.layers[static_cast<size_t>(local(layer))];
  LayerActivations act = layer_activations_f32(saved, false);
  if (mixed()) act.out = buf_.x32[(local(layer) + 1) % 2];  // ping-pong with the input, which stays valid
  LayerContext ctx = context(slot.in, slot.first_sample, dropout, layer);
  ctx.aux_loss_scale = slot.aux_loss_scale;
  if (record && config_.mlp_kind(layer) == MlpKind::moe) ctx.moe_stats = &moe_stats_[static_cast<size_t>(local(layer))];
  transformer_layer_fwd(ctx, layer_weights_f32(layer), x, act, buf_.scratch, with_output);
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
  StageSlot& slot = slot_at(slot_index, op);
  // Reusing a slot before its backward would overwrite the activations that backward needs.
  MT_CHECK(!slot.busy) << op << ": slot " << slot_index
                       << " holds a micro-batch whose backward() has not run yet; use another slot";
  const bool train = options.grad_scale != 0.0f;
  double num_tokens = 0.0;
  if (range_.head) num_tokens = load_labels(batch, options.grad_scale, op);
  load_inputs(slot.in, batch, op);
  slot.first_sample = options.first_sample;
  slot.dropout = options.dropout;
  slot.aux_loss_scale = train ? options.aux_loss_scale : 0.0f;
  const int64_t first = range_.first_layer;
  const LayerContext ctx = context(slot.in, slot.first_sample, options.dropout, first - 1);
  TensorView x = mixed() ? buf_.x32[0] : slot.input;
  if (range_.embedding) {
    MT_CHECK(input.empty()) << op << ": the first stage embeds the tokens; it takes no input hidden states";
    need(params_->embedding_params());
    embedding_block_fwd(ctx, embedding_weights_f32(), vocab_shard(), {slot.in.tokens, ctx.positions}, x,
                        slot.emb_drop_mask, buf_.scratch.dense, buf_.scratch.sp_partial);
    if (mixed()) cast(slot.input, x);
  } else {
    receive(input, slot.input, op);
    x = as_f32(slot.input, x);
  }
  for (int64_t i = first; i < range_.last_layer; ++i) {
    need(params_->layer_params(i));
    x = layer_fwd(slot, i, x, options.dropout, /*record=*/train);
  }
  StageForward result;
  if (range_.head) {
    need(params_->head_params());
    output_head_fwd(ctx, head_weights_f32(), head_grads(), vocab_shard().start, x, slot.head, buf_.head_scratch,
                    {buf_.labels, buf_.losses, buf_.dlosses, TensorView(), options.grad_scale});
    result.loss = loss_sums(num_tokens);
  } else {
    result.hidden = range_.num_layers() > 0 ? slot.layers.back().out : slot.input;
  }
  slot.busy = train;
  return result;
}

TensorView Stage::backward(int slot_index, const TensorView& output_grad) {
  const char* op = "Stage::backward";
  StageSlot& slot = slot_at(slot_index, op);
  MT_CHECK(slot.busy) << op << ": slot " << slot_index << " has no training forward (one with a nonzero grad_scale) "
                      << "waiting for its backward";
  const GptTensors& g = grads_;
  const int64_t first = range_.first_layer, last = range_.last_layer;
  if (range_.head) {
    MT_CHECK(output_grad.empty()) << op << ": the last stage's loss ends the graph; it takes no output gradient";
    const TensorView x = last > first ? slot.layers.back().out : slot.input;
    output_head_bwd(context(slot.in, slot.first_sample, slot.dropout, last), final_norm_f32(), head_grads().final_norm,
                    as_f32(x, buf_.x32[1]), slot.head, buf_.dx);
    if (grads_ready_) grads_ready_(params_->head_params());
  } else {
    check_shape(output_grad, buf_.dx.shape, op, "output_grad");
    check_dtype(output_grad, DType::f32, op, "output_grad");
    copy_tensor(buf_.dx, output_grad);
  }
  const bool dropout = slot.dropout;  // as in the forward
  for (int64_t i = last - 1; i >= first; --i) {
    if (recompute_.group_last(i)) {
      // Rerun the group's forward from its saved input: same weights, same dropout masks. The
      // last layer's output is saved, so its rerun stops short of fc2.
      const int64_t g0 = recompute_.group_first(i);
      TensorView x = layer_input_f32(slot, g0, buf_.x32[local(g0) % 2]);
      for (int64_t j = g0; j <= i; ++j) x = layer_fwd(slot, j, x, dropout, /*record=*/false, /*with_output=*/j < i);
    }
    const TensorView x = layer_input_f32(slot, i, buf_.x32[0]);
    LayerContext ctx = context(slot.in, slot.first_sample, dropout, i);
    ctx.aux_loss_scale = slot.aux_loss_scale;
    transformer_layer_bwd(ctx, layer_weights_f32(i), g.layers[local(i)], x,
                          layer_activations_f32(slot.layers[local(i)], true), buf_.scratch, buf_.dx);
    if (grads_ready_) grads_ready_(params_->layer_params(i));
  }
  slot.busy = false;
  if (!range_.embedding) return buf_.dx;
  const LayerContext ctx = context(slot.in, slot.first_sample, dropout, first - 1);
  embedding_block_bwd(ctx, {g.word_embeddings, g.position_embeddings}, vocab_shard(), {slot.in.tokens, ctx.positions},
                      buf_.dx, slot.emb_drop_mask, buf_.scratch.dense, buf_.scratch.sp_gathered);
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
  load_inputs(buf_.transient_in, batch, op);
  const int64_t first = range_.first_layer;
  const LayerContext ctx = context(buf_.transient_in, 0, /*dropout=*/false, first - 1);
  TensorView x = buf_.transient_x[0];
  if (range_.embedding) {
    MT_CHECK(input.empty()) << op << ": the first stage embeds the tokens; it takes no input hidden states";
    need(params_->embedding_params());
    embedding_block_fwd(ctx, embedding_weights_f32(), vocab_shard(), {buf_.transient_in.tokens, ctx.positions}, x,
                        buf_.transient.attn_drop_mask, buf_.scratch.dense, buf_.scratch.sp_partial);
  } else {
    receive(input, x, op);
    round_to_dtype(x, config_.params_dtype);  // as the training forward's copy in the activation dtype
  }
  for (int64_t i = first; i < range_.last_layer; ++i) {
    need(params_->layer_params(i));
    LayerActivations act = buf_.transient;
    act.out = buf_.transient_x[(local(i) + 1) % 2];
    transformer_layer_fwd(context(buf_.transient_in, 0, false, i), layer_weights_f32(i), x, act, buf_.scratch);
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
  head.final_norm = buf_.transient.norm1;
  output_head_fwd(ctx, head_weights_f32(), head_grads(), vocab_shard().start, x, head, buf_.head_scratch,
                  {with_loss ? buf_.labels : TensorView(), buf_.losses, buf_.dlosses, logits, 0.0f});
  if (with_loss) result.loss = loss_sums(num_tokens);
  return result;
}

}  // namespace mt
