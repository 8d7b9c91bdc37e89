#include "app/train_flags.h"

#include <map>

#include <optional>
#include <string>

#include "base/error.h"
#include "train/batch_schedule.h"

namespace mt {

namespace {

// The --moe-* flags; all refused without --num-experts.
MoeConfig moe_config(const Options& o) {
  MoeConfig m;
  if (!o.has("--num-experts")) {
    for (const OptionSpec& spec : option_table()) {
      const std::string name = spec.name;
      if (name == "--expert-tensor-parallel-size") continue;  // Megatron accepts it on a dense model (a note says so)
      MT_CHECK(!(o.given(name) && (name.rfind("--moe-", 0) == 0 || name.rfind("--expert-", 0) == 0)))
          << name << " applies to mixture-of-experts models: pass --num-experts";
    }
    // Megatron still lays out the (unused) expert grid and checks it against the dense one.
    if (o.has("--expert-tensor-parallel-size")) m.expert_tensor_parallel_size = o.integer("--expert-tensor-parallel-size");
    return m;
  }
  m.num_experts = o.integer("--num-experts");
  MT_CHECK(m.num_experts > 0) << "--num-experts must be positive, got " << m.num_experts;
  m.layer_freq = o.text("--moe-layer-freq");
  if (o.has("--moe-ffn-hidden-size")) m.ffn_hidden_size = o.integer("--moe-ffn-hidden-size");
  if (o.has("--moe-shared-expert-intermediate-size"))
    m.shared_expert_intermediate_size = o.integer("--moe-shared-expert-intermediate-size");
  MoeRouterOptions& r = m.router;
  r.topk = o.integer("--moe-router-topk");
  r.score_function = o.text("--moe-router-score-function") == "sigmoid" ? MoeScoreFunction::sigmoid
                                                                         : MoeScoreFunction::softmax;
  // Megatron applies the pre-softmax to softmax scores only; with sigmoid it changes nothing (a note says so).
  r.pre_softmax = o.flag("--moe-router-pre-softmax") && r.score_function == MoeScoreFunction::softmax;
  if (o.has("--moe-router-topk-scaling-factor")) {
    r.scaling_factor = static_cast<float>(o.real("--moe-router-topk-scaling-factor"));
    MT_CHECK(r.scaling_factor > 0) << "--moe-router-topk-scaling-factor must be positive";
  }
  if (o.has("--moe-router-num-groups")) r.num_groups = o.integer("--moe-router-num-groups");
  if (o.has("--moe-router-group-topk")) r.group_topk = o.integer("--moe-router-group-topk");
  m.expert_bias = o.flag("--moe-router-enable-expert-bias");
  m.bias_update_rate = static_cast<float>(o.real("--moe-router-bias-update-rate"));
  if (o.has("--moe-router-dtype")) {
    MT_CHECK(o.text("--moe-router-dtype") == "fp32")
        << "--moe-router-dtype fp64 is not supported: the router's GEMM runs in fp32 (its losses and weights are "
           "computed in double already); pass fp32";
    m.router_fp32 = true;
  }
  const std::string balancing = o.text("--moe-router-load-balancing-type");
  m.load_balancing = balancing == "seq_aux_loss"      ? MoeLoadBalancing::seq_aux_loss
                     : balancing == "global_aux_loss" ? MoeLoadBalancing::global_aux_loss
                     : balancing == "none"            ? MoeLoadBalancing::none
                     : balancing == "sinkhorn"        ? MoeLoadBalancing::sinkhorn
                                                      : MoeLoadBalancing::aux_loss;
  m.aux_loss_coeff = o.real("--moe-aux-loss-coeff");
  if (o.has("--moe-z-loss-coeff")) m.z_loss_coeff = o.real("--moe-z-loss-coeff");
  if (o.has("--moe-expert-capacity-factor")) m.capacity.capacity_factor = o.real("--moe-expert-capacity-factor");
  m.capacity.pad_to_capacity = o.flag("--moe-pad-expert-input-to-capacity");
  MT_CHECK(!o.given("--moe-token-drop-policy") || m.capacity.capacity_factor)
      << "--moe-token-drop-policy needs --moe-expert-capacity-factor (without it nothing is dropped)";
  m.capacity.drop_policy = o.text("--moe-token-drop-policy") == "position" ? MoeDropPolicy::position : MoeDropPolicy::probs;
  // flex is Megatron's alltoall exchange through DeepEP/HybridEP kernels: the same tokens reach the same experts.
  m.dispatcher = o.text("--moe-token-dispatcher-type") == "allgather" ? MoeDispatcher::allgather : MoeDispatcher::alltoall;
  m.experts_impl = o.flag("--moe-grouped-gemm") ? MoeExpertsImpl::grouped : MoeExpertsImpl::sequential;
  m.expert_model_parallel_size = o.integer("--expert-model-parallel-size");
  if (o.has("--expert-tensor-parallel-size")) m.expert_tensor_parallel_size = o.integer("--expert-tensor-parallel-size");
  return m;
}

// --optimizer muon's settings (Megatron's --muon-* flags and defaults).
MuonConfig muon_config(const Options& o) {
  MT_CHECK(!o.flag("--fp16")) << "--optimizer " << o.text("--optimizer")
                              << " does not run under --fp16 (as in Megatron): use --bf16";
  MuonConfig m;
  m.momentum = static_cast<float>(o.real("--muon-momentum"));
  MT_CHECK(m.momentum >= 0.0f && m.momentum < 1.0f) << "--muon-momentum " << m.momentum << " must lie in [0, 1)";
  m.nesterov = o.flag("--muon-nesterov");
  m.split_qkv = !o.flag("--muon-no-split-qkv");
  const std::string scale = o.text("--muon-scale-mode");
  m.scale_mode = scale == "unit_rms_norm"   ? MuonScaleMode::unit_rms_norm
                 : scale == "shape_scaling" ? MuonScaleMode::shape_scaling
                                            : MuonScaleMode::spectral;
  m.extra_scale_factor = static_cast<float>(o.real("--muon-extra-scale-factor"));
  m.bf16_iteration = o.text("--muon-fp32-matmul-prec") == "medium";
  m.coefficient_type = o.text("--muon-coefficient-type");
  m.num_ns_steps = static_cast<int>(o.integer("--muon-num-ns-steps"));
  newton_schulz_steps(m.coefficient_type, m.num_ns_steps);  // refuses a bad count here, at start
  const std::string tp_mode = o.text("--muon-tp-mode");
  m.tp_mode = tp_mode == "blockwise"     ? MuonTpMode::blockwise
              : tp_mode == "distributed" ? MuonTpMode::distributed
                                         : MuonTpMode::duplicated;
  return m;
}

}  // namespace

std::vector<std::string> inert_flag_notes(const Options& o, const ModelConfig& c) {
  std::vector<std::string> notes;
  const auto given_as = [&o](const char* name, const char* value) { return o.given(name) && o.text(name) == value; };
  if (o.flag("--moe-router-pre-softmax") && given_as("--moe-router-score-function", "sigmoid"))
    notes.push_back("--moe-router-pre-softmax has no effect with --moe-router-score-function sigmoid (as in Megatron)");
  if (o.given("--expert-tensor-parallel-size") && !o.has("--num-experts"))
    notes.push_back("--expert-tensor-parallel-size on a model without experts only lays out the expert grid (as in Megatron)");
  if (o.given("--save-interval") && !o.has("--save"))
    notes.push_back("--save-interval without --save: nothing is saved (as in Megatron)");
  if (given_as("--optimizer", "dist_muon"))
    notes.push_back("--optimizer dist_muon runs as --optimizer muon --use-distributed-optimizer (Megatron's deprecated "
                    "name for its layer-wise distributed Muon; the same updates)");
  if (given_as("--muon-tp-mode", "distributed"))
    notes.push_back("--muon-tp-mode distributed orthogonalises each matrix whole on every tensor-parallel rank, as "
                    "duplicated does (Megatron splits that work over the ranks; the result is the same)");
  if (given_as("--moe-token-dispatcher-type", "flex"))
    notes.push_back("--moe-token-dispatcher-type flex runs as alltoall: the same exchange, without DeepEP/HybridEP kernels");
  if ((given_as("--attention-backend", "unfused") || given_as("--attention-backend", "local")) &&
      c.attention_impl == AttentionImpl::flash)
    notes.push_back("--attention-backend " + o.text("--attention-backend") +
                    " under selective recomputation of core_attn: the attention core is recomputed in the backward "
                    "pass, as the flash path does (no probabilities are kept)");
  return notes;
}

namespace {
// --cp-comm-type: one value, or one per layer as Megatron allows (all the same here).
CpCommType cp_comm_type(const Options& o) {
  const std::vector<std::string> values = o.list("--cp-comm-type");
  MT_CHECK(!values.empty()) << "--cp-comm-type needs a value: p2p, a2a or allgather";
  for (const std::string& v : values) {
    MT_CHECK(v != "a2a+p2p") << "--cp-comm-type a2a+p2p is not implemented in megatron.cpp: hierarchical context "
                             << "parallelism (planned); use p2p, a2a or allgather";
    MT_CHECK(v == "p2p" || v == "a2a" || v == "allgather")
        << "--cp-comm-type " << v << " is not one of p2p, a2a, allgather, a2a+p2p";
    MT_CHECK(v == values.front()) << "--cp-comm-type " << values.front() << " ... " << v
                                  << ": a different comm type per layer is not implemented in megatron.cpp; give one";
  }
  return values.front() == "a2a" ? CpCommType::a2a : values.front() == "allgather" ? CpCommType::allgather
                                                                                    : CpCommType::p2p;
}
}  // namespace

ModelConfig model_config(const Options& o) {
  ModelConfig c;
  c.num_layers = o.integer("--num-layers");
  c.hidden_size = o.integer("--hidden-size");
  if (o.has("--ffn-hidden-size")) c.ffn_hidden_size = o.integer("--ffn-hidden-size");
  c.num_attention_heads = o.integer("--num-attention-heads");
  if (o.has("--num-query-groups")) {
    MT_CHECK(o.flag("--group-query-attention")) << "--num-query-groups needs --group-query-attention";
    c.num_query_groups = o.integer("--num-query-groups");
  } else {
    MT_CHECK(!o.flag("--group-query-attention")) << "--group-query-attention needs --num-query-groups";
  }
  if (o.has("--kv-channels")) c.kv_channels = o.integer("--kv-channels");
  c.seq_length = o.integer("--seq-length");
  if (o.has("--max-position-embeddings")) c.max_position_embeddings = o.integer("--max-position-embeddings");
  // --use-rotary-position-embeddings is Megatron's old spelling of rope (validate_args sets it, whatever
  // --position-embedding-type says).
  const std::string positions = o.text("--position-embedding-type");
  c.position_embedding_type = positions == "rope" || o.flag("--use-rotary-position-embeddings") ? PositionEmbedding::rope
                              : positions == "none"                                           ? PositionEmbedding::none
                                                                                              : PositionEmbedding::learned_absolute;
  // Megatron's Llama scripts pass --no-position-embedding beside rope, where it changes nothing; elsewhere
  // Megatron refuses it too.
  MT_CHECK(!o.flag("--no-position-embedding") || c.position_embedding_type == PositionEmbedding::rope)
      << "--no-position-embedding is deprecated without rope (as in Megatron): pass --position-embedding-type none";
  c.rotary_base = o.real("--rotary-base");
  c.rotary_percent = o.real("--rotary-percent");
  c.rotary_interleaved = o.flag("--rotary-interleaved");
  c.normalization = o.text("--normalization") == "RMSNorm" ? Normalization::rmsnorm : Normalization::layernorm;
  c.norm_epsilon = static_cast<float>(o.real("--norm-epsilon"));
  c.layernorm_zero_centered_gamma = o.flag("--apply-layernorm-1p");
  c.qk_layernorm = o.flag("--qk-layernorm");
  MT_CHECK(o.flag("--swiglu") + o.flag("--openai-gelu") + o.flag("--squared-relu") <= 1)
      << "--swiglu, --openai-gelu and --squared-relu exclude each other";
  c.activation = o.flag("--swiglu")         ? Activation::swiglu
                 : o.flag("--openai-gelu")  ? Activation::gelu_tanh
                 : o.flag("--squared-relu") ? Activation::squared_relu
                                            : Activation::gelu;
  c.add_bias_linear = !o.flag("--disable-bias-linear");
  c.hidden_dropout = static_cast<float>(o.real("--hidden-dropout"));
  c.attention_dropout = static_cast<float>(o.real("--attention-dropout"));
  c.init_method_std = static_cast<float>(o.real("--init-method-std"));
  if (o.has("--vocab-size")) c.vocab_size = o.integer("--vocab-size");
  c.make_vocab_size_divisible_by = o.integer("--make-vocab-size-divisible-by");
  c.untie_embeddings_and_output_weights = o.flag("--untie-embeddings-and-output-weights");
  const std::string attention = o.text("--attention-backend");
  c.attention_impl = attention == "unfused" || attention == "local" ? AttentionImpl::unfused : AttentionImpl::flash;
  MT_CHECK(!(o.flag("--bf16") && o.flag("--fp16"))) << "--bf16 and --fp16 exclude each other";
  c.params_dtype = o.flag("--bf16") ? DType::bf16 : o.flag("--fp16") ? DType::f16 : DType::f32;
  std::string granularity = o.has("--recompute-granularity") ? o.text("--recompute-granularity") : "";
  if (o.flag("--recompute-activations")) {
    MT_CHECK(granularity.empty() || granularity == "selective")
        << "--recompute-activations means --recompute-granularity selective; drop one of them";
    granularity = "selective";
  }
  if (granularity == "full") {
    MT_CHECK(o.has("--recompute-method"))
        << "--recompute-granularity full needs --recompute-method uniform or block";
    c.recompute_granularity = RecomputeGranularity::full;
    c.recompute_method = o.text("--recompute-method") == "block" ? RecomputeMethod::block : RecomputeMethod::uniform;
  } else {
    MT_CHECK(!o.has("--recompute-method")) << "--recompute-method applies to --recompute-granularity full only";
    if (granularity == "selective") c.recompute_granularity = RecomputeGranularity::selective;
  }
  // Megatron's deprecated spelling of --recompute-modules moe (with the default core_attn).
  if (o.flag("--moe-layer-recompute")) {
    MT_CHECK(granularity != "full") << "--moe-layer-recompute is selective recomputation of the MoE blocks; it "
                                       "contradicts --recompute-granularity full";
    granularity = "selective";
    c.recompute_granularity = RecomputeGranularity::selective;
    c.recompute_moe = true;
  }
  if (o.has("--recompute-modules")) {
    MT_CHECK(granularity == "selective") << "--recompute-modules applies to --recompute-granularity selective only";
    c.recompute_core_attn = false;
    // Megatron's modules for blocks megatron.cpp lacks, refused naming the block.
    const std::map<std::string, std::string> missing = {
        {"mla_up_proj", "multi-latent attention (DeepSeek-V3 layers) (planned)"},
        {"gdn_norm_out", "gated delta net attention"},
        {"gdp_in_proj", "gated delta net attention"},
        {"gdp_qkv", "gated delta net attention"},
        {"mhc", "manifold-constrained hyper-connections"}};
    for (const std::string& module : o.list("--recompute-modules")) {
      if (const auto it = missing.find(module); it != missing.end())
        MT_FAIL() << "--recompute-modules " << module << " is not implemented in megatron.cpp: " << it->second;
      // moe_act, like layernorm, is always recomputed here: the experts' activation output is never kept.
      MT_CHECK(module == "core_attn" || module == "layernorm" || module == "mlp" || module == "moe_act" ||
               module == "moe" || module == "shared_experts")
          << "--recompute-modules " << module
          << ": the modules are core_attn, layernorm, mlp, moe_act, moe and shared_experts";
      if (module == "core_attn") c.recompute_core_attn = true;
      if (module == "mlp") c.recompute_mlp = true;
      if (module == "moe") c.recompute_moe = true;  // stays set under --moe-layer-recompute
      if (module == "shared_experts") c.recompute_shared_experts = true;
    }
  }
  // Megatron recomputes the unfused attention core in the backward pass when selective recomputation
  // names core_attn: what the flash path does, keeping no probabilities (a note says so).
  if (c.recompute_granularity == RecomputeGranularity::selective && c.recompute_core_attn)
    c.attention_impl = AttentionImpl::flash;
  c.recompute_num_layers = o.integer("--recompute-num-layers");
  c.tensor_model_parallel_size = o.integer("--tensor-model-parallel-size");
  c.sequence_parallel = o.flag("--sequence-parallel");
  c.context_parallel_size = o.integer("--context-parallel-size");
  c.cp_comm_type = cp_comm_type(o);
  c.moe = moe_config(o);
  return c;
}

namespace {

std::optional<int64_t> optional_integer(const Options& o, const char* name) {
  if (!o.has(name)) return std::nullopt;
  return o.integer(name);
}

std::optional<double> optional_real(const Options& o, const char* name) {
  if (!o.has(name)) return std::nullopt;
  return o.real(name);
}

// A count that must be >= 1 and fit an int (a rank or stage count).
int small_positive(int64_t value, const char* flag) {
  MT_CHECK(value >= 1 && value <= 1'000'000) << flag << " must be between 1 and 1000000 (got " << value << ")";
  return static_cast<int>(value);
}

}  // namespace

TrainConfig train_config(const Options& o, bool for_plan) {
  TrainConfig t;
  MT_CHECK(o.has("--micro-batch-size")) << "pass --micro-batch-size (sequences per micro-batch)";
  t.micro_batch_size = o.integer("--micro-batch-size");
  if (o.has("--global-batch-size")) t.global_batch_size = o.integer("--global-batch-size");
  // Thresholds count tokens: GPT always knows its sequence length (Megatron passes it too).
  if (o.has("--step-batch-size-schedule"))
    t.step_batch_size_schedule =
        BatchSchedule::parse(o.text("--step-batch-size-schedule"), o.integer("--seq-length"));
  if (o.has("--eval-global-batch-size")) t.eval_global_batch_size = o.integer("--eval-global-batch-size");
  t.train_iters = optional_integer(o, "--train-iters");
  // A plan's memory and step do not depend on the run's length.
  if (for_plan && !o.has("--train-iters") && !o.has("--train-samples")) t.train_iters = 1;
  t.train_samples = optional_integer(o, "--train-samples");
  t.log_interval = o.integer("--log-interval");
  t.log_params_norm = o.flag("--log-params-norm");
  t.eval_interval = optional_integer(o, "--eval-interval");
  t.eval_iters = o.integer("--eval-iters");
  t.exit_interval = optional_integer(o, "--exit-interval");
  t.exit_duration_in_mins = optional_real(o, "--exit-duration-in-mins");
  if (o.flag("--exit-signal-handler")) t.exit_signal = static_cast<int>(o.integer("--exit-signal"));
  t.check_weight_hash_interval = optional_integer(o, "--check-weight-hash-across-dp-replicas-interval");
  t.checkpoint.save_retain_interval = optional_integer(o, "--save-retain-interval");
  t.seed = static_cast<uint64_t>(o.integer("--seed"));
  t.use_tp_pp_dp_mapping = o.flag("--use-tp-pp-dp-mapping");
  t.pipeline.pp = small_positive(o.integer("--pipeline-model-parallel-size"), "--pipeline-model-parallel-size");
  t.pipeline.first_stage_layers = optional_integer(o, "--decoder-first-pipeline-num-layers");
  t.pipeline.last_stage_layers = optional_integer(o, "--decoder-last-pipeline-num-layers");
  t.pipeline.account_for_embedding = o.flag("--account-for-embedding-in-pipeline-split");
  t.pipeline.account_for_loss = o.flag("--account-for-loss-in-pipeline-split");
  t.pipeline.layers_per_virtual_stage = optional_integer(o, "--num-layers-per-virtual-pipeline-stage");
  if (o.has("--pipeline-model-parallel-layout")) t.pipeline.layout = o.text("--pipeline-model-parallel-layout");
  if (const std::optional<int64_t> v = optional_integer(o, "--num-virtual-stages-per-pipeline-rank"))
    t.pipeline.virtual_stages_per_rank = small_positive(*v, "--num-virtual-stages-per-pipeline-rank");
  if (const std::optional<int64_t> g = optional_integer(o, "--microbatch-group-size-per-virtual-pipeline-stage"))
    t.microbatch_group_size = small_positive(*g, "--microbatch-group-size-per-virtual-pipeline-stage");
  // dist_muon: Megatron's deprecated name for Muon under its layer-wise distributed optimizer.
  t.use_distributed_optimizer = o.flag("--use-distributed-optimizer") || o.text("--optimizer") == "dist_muon";
  t.num_distributed_optimizer_instances =
      small_positive(o.integer("--num-distributed-optimizer-instances"), "--num-distributed-optimizer-instances");
  t.overlap_grad_reduce = o.flag("--overlap-grad-reduce");
  t.ddp_bucket_size = o.integer("--ddp-bucket-size");
  t.overlap_param_gather = o.flag("--overlap-param-gather");
  t.ddp_average_in_collective = o.flag("--ddp-average-in-collective");
  if (o.has("--save")) t.checkpoint.save = o.text("--save");
  if (o.has("--load")) t.checkpoint.load = o.text("--load");
  if (o.has("--save-interval")) t.checkpoint.save_interval = o.integer("--save-interval");
  t.checkpoint.ckpt_step = optional_integer(o, "--ckpt-step");
  t.checkpoint.no_save_optim = o.flag("--no-save-optim");
  t.checkpoint.no_load_optim = o.flag("--no-load-optim");
  t.checkpoint.no_save_rng = o.flag("--no-save-rng");
  t.checkpoint.no_load_rng = o.flag("--no-load-rng");
  t.checkpoint.finetune = o.flag("--finetune");
  const bool override_schedule = o.flag("--override-opt_param-scheduler") || o.flag("--override-opt-param-scheduler");
  const bool checkpoint_schedule =
      o.flag("--use-checkpoint-opt_param-scheduler") || o.flag("--use-checkpoint-opt-param-scheduler");
  MT_CHECK(!(override_schedule && checkpoint_schedule))
      << "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler exclude each other";
  t.checkpoint.schedule_on_resume = override_schedule     ? ScheduleOnResume::from_flags
                                    : checkpoint_schedule ? ScheduleOnResume::from_checkpoint
                                                          : ScheduleOnResume::must_match;
  t.checkpoint.exit_on_missing_checkpoint = o.flag("--exit-on-missing-checkpoint");
  t.calculate_per_token_loss = o.flag("--calculate-per-token-loss");
  t.eod_mask_loss = o.flag("--eod-mask-loss");
  t.reset_position_ids = o.flag("--reset-position-ids");
  t.reset_attention_mask = o.flag("--reset-attention-mask");
  t.optimizer.adam_beta1 = static_cast<float>(o.real("--adam-beta1"));
  t.optimizer.adam_beta2 = static_cast<float>(o.real("--adam-beta2"));
  t.optimizer.adam_eps = static_cast<float>(o.real("--adam-eps"));
  t.optimizer.clip_grad = static_cast<float>(o.real("--clip-grad"));
  t.optimizer.apply_wd_to_qk_layernorm = o.flag("--apply-wd-to-qk-layernorm");
  if (o.text("--optimizer") != "adam") t.optimizer.muon = muon_config(o);
  t.decoupled_lr = optional_real(o, "--decoupled-lr");
  t.decoupled_min_lr = optional_real(o, "--decoupled-min-lr");
  t.loss_scale.bf16 = o.flag("--bf16");
  t.loss_scale.fp16 = o.flag("--fp16");
  t.loss_scale.loss_scale = optional_real(o, "--loss-scale");
  t.loss_scale.initial_loss_scale = o.real("--initial-loss-scale");
  t.loss_scale.min_loss_scale = o.real("--min-loss-scale");
  t.loss_scale.loss_scale_window = o.integer("--loss-scale-window");
  t.loss_scale.hysteresis = o.integer("--hysteresis");

  // Megatron has no default learning rate (its scheduler asserts on None).
  MT_CHECK(for_plan || o.has("--lr")) << "pass --lr (the peak learning rate)";
  LrScheduleFlags& f = t.schedule;
  f.lr = o.has("--lr") ? o.real("--lr") : 0.0;
  f.min_lr = o.real("--min-lr");
  f.lr_warmup_init = o.real("--lr-warmup-init");
  f.lr_decay_style = o.text("--lr-decay-style");
  f.lr_wsd_decay_style = o.text("--lr-wsd-decay-style");
  f.lr_decay_iters = optional_integer(o, "--lr-decay-iters");
  f.lr_warmup_iters = o.integer("--lr-warmup-iters");
  f.lr_wsd_decay_iters = optional_integer(o, "--lr-wsd-decay-iters");
  f.lr_decay_samples = optional_integer(o, "--lr-decay-samples");
  f.lr_warmup_samples = o.integer("--lr-warmup-samples");
  f.lr_wsd_decay_samples = optional_integer(o, "--lr-wsd-decay-samples");
  f.lr_warmup_fraction = optional_real(o, "--lr-warmup-fraction");
  f.weight_decay = o.real("--weight-decay");
  f.start_weight_decay = optional_real(o, "--start-weight-decay");
  f.end_weight_decay = optional_real(o, "--end-weight-decay");
  f.weight_decay_incr_style = o.text("--weight-decay-incr-style");
  return t;
}

}  // namespace mt
