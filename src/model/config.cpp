#include "model/config.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"
#include "model/list_expression.h"

namespace mt {

void ModelConfig::finalize() {
  const int64_t tp = tensor_model_parallel_size;
  MT_CHECK(num_layers > 0) << "--num-layers must be positive, got " << num_layers;
  MT_CHECK(hidden_size > 0) << "--hidden-size must be positive, got " << hidden_size;
  MT_CHECK(num_attention_heads > 0) << "--num-attention-heads must be positive, got " << num_attention_heads;
  MT_CHECK(seq_length > 0) << "--seq-length must be positive, got " << seq_length;
  MT_CHECK(vocab_size > 0) << "the vocabulary size is unknown: pass --vocab-size or a tokenizer";
  MT_CHECK(make_vocab_size_divisible_by > 0) << "--make-vocab-size-divisible-by must be positive";
  if (num_query_groups == 0) num_query_groups = num_attention_heads;
  if (kv_channels == 0) {
    MT_CHECK(hidden_size % num_attention_heads == 0)
        << "--hidden-size " << hidden_size << " is not divisible by --num-attention-heads " << num_attention_heads
        << "; pass --kv-channels to set the head dimension explicitly";
    kv_channels = hidden_size / num_attention_heads;
  }
  if (ffn_hidden_size == 0) {
    // Megatron: 4h, or for SwiGLU two thirds of that rounded down to a multiple of 64.
    ffn_hidden_size = activation == Activation::swiglu ? (4 * hidden_size * 2 / 3) / 64 * 64 : 4 * hidden_size;
    MT_CHECK(ffn_hidden_size > 0) << "derived --ffn-hidden-size is 0; pass --ffn-hidden-size";
  }
  if (max_position_embeddings == 0) max_position_embeddings = seq_length;

  MT_CHECK(num_query_groups > 0) << "--num-query-groups must be positive, got " << num_query_groups;
  MT_CHECK(kv_channels > 0) << "--kv-channels must be positive, got " << kv_channels;
  MT_CHECK(max_position_embeddings > 0) << "--max-position-embeddings must be positive, got "
                                        << max_position_embeddings;
  MT_CHECK(num_attention_heads % num_query_groups == 0)
      << "--num-attention-heads " << num_attention_heads << " is not divisible by --num-query-groups "
      << num_query_groups;
  MT_CHECK(ffn_hidden_size > 0) << "--ffn-hidden-size must be positive";
  MT_CHECK(tp > 0) << "--tensor-model-parallel-size must be positive, got " << tp;
  MT_CHECK(num_attention_heads % tp == 0)
      << "--num-attention-heads " << num_attention_heads << " is not divisible by --tensor-model-parallel-size " << tp;
  MT_CHECK(num_query_groups % tp == 0)
      << "--num-query-groups " << num_query_groups << " is not divisible by --tensor-model-parallel-size " << tp;
  MT_CHECK(ffn_hidden_size % tp == 0)
      << "--ffn-hidden-size " << ffn_hidden_size << " is not divisible by --tensor-model-parallel-size " << tp;
  const int64_t cp = context_parallel_size;
  MT_CHECK(cp > 0) << "--context-parallel-size must be positive, got " << cp;
  MT_CHECK(cp == 1 || seq_length % (2 * cp) == 0)
      << "--context-parallel-size " << cp << " cuts each sequence into " << 2 * cp
      << " equal chunks (two per rank, for balanced causal work): --seq-length " << seq_length
      << " is not divisible by " << 2 * cp;
  MT_CHECK(cp == 1 || attention_impl == AttentionImpl::flash)
      << "--context-parallel-size " << cp << " needs the flash attention path (drop --attention-backend unfused)";
  MT_CHECK(!sequence_parallel || (seq_length / cp) % tp == 0)
      << "--sequence-parallel splits the sequence over the tensor-parallel ranks: --seq-length " << seq_length
      << (cp > 1 ? " / --context-parallel-size " + std::to_string(cp) : std::string())
      << " is not divisible by --tensor-model-parallel-size " << tp;
  MT_CHECK(rotary_percent > 0.0 && rotary_percent <= 1.0)
      << "--rotary-percent must be in (0, 1], got " << rotary_percent;
  if (position_embedding_type == PositionEmbedding::learned_absolute) {
    MT_CHECK(seq_length <= max_position_embeddings)
        << "--seq-length " << seq_length << " exceeds --max-position-embeddings " << max_position_embeddings;
  } else if (position_embedding_type == PositionEmbedding::rope) {
    const int64_t r = rotary_dim();
    MT_CHECK(r >= 1) << "--rotary-percent " << rotary_percent << " of head dimension " << kv_channels
                     << " rotates no element (int(" << kv_channels << " x " << rotary_percent << ") = 0)";
    // Below 1.0 the rotated width is at most d − 1, so its pairs (ceil(r/2) of them) always fit.
    MT_CHECK(2 * rope_table_width() <= kv_channels)
        << "RoPE needs an even head dimension, got --kv-channels " << kv_channels
        << " (or rotate part of each head with --rotary-percent)";
    MT_CHECK(seq_length <= max_position_embeddings)
        << "--seq-length " << seq_length << " exceeds --max-position-embeddings " << max_position_embeddings
        << " (the RoPE tables cover that many positions)";
    MT_CHECK(rotary_base > 0) << "--rotary-base must be positive";
  }
  MT_CHECK(norm_epsilon > 0) << "--norm-epsilon must be positive";
  MT_CHECK(hidden_dropout >= 0 && hidden_dropout < 1) << "--hidden-dropout must be in [0, 1), got " << hidden_dropout;
  MT_CHECK(attention_dropout >= 0 && attention_dropout < 1)
      << "--attention-dropout must be in [0, 1), got " << attention_dropout;
  MT_CHECK(init_method_std > 0) << "--init-method-std must be positive";
  MT_CHECK((!recompute_mlp && !recompute_shared_experts && !recompute_moe) ||
           recompute_granularity == RecomputeGranularity::selective)
      << "--recompute-modules applies to --recompute-granularity selective only";
  MT_CHECK(!(recompute_granularity == RecomputeGranularity::selective && recompute_core_attn &&
             attention_impl == AttentionImpl::unfused))
      << "--recompute-granularity selective (module core_attn) recomputes the attention probabilities, which contradicts "
         "--attention-backend unfused (it stores them); drop one of the two";
  if (recompute_granularity == RecomputeGranularity::full) {
    MT_CHECK(recompute_num_layers >= 1) << "--recompute-num-layers must be at least 1, got " << recompute_num_layers;
    MT_CHECK(recompute_method == RecomputeMethod::uniform || recompute_num_layers <= num_layers)
        << "--recompute-num-layers " << recompute_num_layers << " exceeds --num-layers " << num_layers
        << " with --recompute-method block";
  }
  MT_CHECK(params_dtype == DType::f32 || params_dtype == DType::bf16 || params_dtype == DType::f16)
      << "parameters can be f32, bf16 (--bf16) or f16 (--fp16), not " << dtype_name(params_dtype);
  if (moe.enabled()) finalize_moe();
}

namespace {

// --moe-layer-freq: "N" (every N-th layer from layer 0, Megatron's integer form) or a list of one
// 0/1 per layer, written as Megatron evaluates it: "[1,0,1,0]", "([0]*3+[1]*5)".
std::vector<uint8_t> moe_layer_pattern(const std::string& freq, int64_t num_layers) {
  std::vector<uint8_t> pattern;
  if (freq.find('[') != std::string::npos) {
    for (int64_t item : evaluate_list_expression(freq)) {
      MT_CHECK(item == 0 || item == 1) << "--moe-layer-freq " << freq << ": every entry must be 0 or 1, got " << item;
      pattern.push_back(static_cast<uint8_t>(item));
    }
    MT_CHECK(static_cast<int64_t>(pattern.size()) == num_layers)
        << "--moe-layer-freq " << freq << " lists " << pattern.size() << " layers but --num-layers is " << num_layers;
    return pattern;
  }
  int64_t n = 0;
  size_t used = 0;
  try {
    n = std::stoll(freq, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MT_CHECK(used == freq.size() && n > 0) << "--moe-layer-freq must be a positive integer or a list like [1,0,1,0] or ([0]*1+[1]*3), got '"
                                         << freq << "'";
  for (int64_t i = 0; i < num_layers; ++i) pattern.push_back(i % n == 0 ? 1 : 0);
  return pattern;
}

}  // namespace

void ModelConfig::finalize_moe() {
  MoeConfig& m = moe;
  const int64_t E = m.num_experts, k = m.router.topk, tp = tensor_model_parallel_size;
  MT_CHECK(E <= kMoeMaxExperts) << "--num-experts " << E << " exceeds the " << kMoeMaxExperts << " experts supported";
  m.layer_is_moe = moe_layer_pattern(m.layer_freq, num_layers);
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = ffn_hidden_size;
  if (m.expert_tensor_parallel_size == 0) m.expert_tensor_parallel_size = tp;
  const int64_t ep = m.expert_model_parallel_size, etp = m.expert_tensor_parallel_size;
  MT_CHECK(m.ffn_hidden_size > 0) << "--moe-ffn-hidden-size must be positive, got " << m.ffn_hidden_size;
  MT_CHECK(m.shared_expert_intermediate_size >= 0 && m.shared_expert_intermediate_size % tp == 0)
      << "--moe-shared-expert-intermediate-size " << m.shared_expert_intermediate_size
      << " must be positive and divisible by --tensor-model-parallel-size " << tp;
  MT_CHECK(k >= 1 && k <= E) << "--moe-router-topk " << k << " must lie in [1, --num-experts " << E << "]";
  MT_CHECK(ep >= 1 && E % ep == 0) << "--num-experts " << E << " is not divisible by --expert-model-parallel-size "
                                   << ep;
  MT_CHECK(etp >= 1 && m.ffn_hidden_size % etp == 0)
      << "--moe-ffn-hidden-size " << m.ffn_hidden_size << " is not divisible by --expert-tensor-parallel-size " << etp;
  MT_CHECK(!add_bias_linear) << "--num-experts: the experts have no biases (as Megatron's grouped experts); pass "
                                "--disable-bias-linear";
  m.router.sinkhorn = m.load_balancing == MoeLoadBalancing::sinkhorn;
  const MoeRouterOptions& r = m.router;
  if (r.sinkhorn) {
    // Megatron asserts the first; its Sinkhorn path ignores the rest, refused here so none is
    // thought to apply.
    MT_CHECK(m.aux_loss_coeff == 0.0) << "Sinkhorn routing does not support aux loss: pass --moe-aux-loss-coeff 0 "
                                         "with --moe-router-load-balancing-type sinkhorn";
    MT_CHECK(r.score_function == MoeScoreFunction::softmax && !r.pre_softmax)
        << "--moe-router-load-balancing-type sinkhorn picks its own score function (sigmoid for --moe-router-topk 1, "
           "else softmax): drop --moe-router-score-function and --moe-router-pre-softmax";
    MT_CHECK(r.num_groups == 0 && r.group_topk == 0 && r.scaling_factor == 0.0f && !m.expert_bias)
        << "--moe-router-load-balancing-type sinkhorn does not apply group-limited routing, "
           "--moe-router-topk-scaling-factor or --moe-router-enable-expert-bias: drop them";
  }
  MT_CHECK(r.sinkhorn || !(r.score_function == MoeScoreFunction::softmax && !r.pre_softmax && k == 1))
      << "--moe-router-topk 1 with the softmax after the top-k gives every token the weight 1 and the router no "
         "gradient; pass --moe-router-pre-softmax, --moe-router-score-function sigmoid or "
         "--moe-router-load-balancing-type sinkhorn";
  MT_CHECK(!r.pre_softmax || r.score_function == MoeScoreFunction::softmax)
      << "--moe-router-pre-softmax applies to --moe-router-score-function softmax only";
  MT_CHECK(!m.expert_bias || r.score_function == MoeScoreFunction::sigmoid)
      << "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid";
  MT_CHECK(m.bias_update_rate >= 0) << "--moe-router-bias-update-rate must not be negative";
  MT_CHECK(r.scaling_factor >= 0) << "--moe-router-topk-scaling-factor must be positive";
  if (r.num_groups > 0 || r.group_topk > 0) {
    const int64_t G = r.num_groups, g = r.group_topk;
    MT_CHECK(G > 0 && g > 0) << "group-limited routing needs both --moe-router-num-groups and --moe-router-group-topk";
    MT_CHECK(E % G == 0) << "--moe-router-num-groups " << G << " does not divide --num-experts " << E;
    MT_CHECK(g <= G) << "--moe-router-group-topk " << g << " exceeds --moe-router-num-groups " << G;
    MT_CHECK(g <= k && k <= g * (E / G)) << "--moe-router-topk " << k << " must lie in [--moe-router-group-topk " << g
                                         << ", " << g * (E / G) << "] (the experts of the " << g << " chosen groups)";
  }
  MT_CHECK(!m.capacity.capacity_factor || *m.capacity.capacity_factor > 0)
      << "--moe-expert-capacity-factor must be positive";
  MT_CHECK(!m.capacity.pad_to_capacity || m.capacity.capacity_factor)
      << "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor";
  MT_CHECK(m.aux_loss_coeff >= 0 && m.z_loss_coeff >= 0) << "--moe-aux-loss-coeff and --moe-z-loss-coeff must not be negative";
  // A full recomputation's rerun would fold its micro-batch into the running mean a second time.
  MT_CHECK(m.load_balancing != MoeLoadBalancing::global_aux_loss ||
           (recompute_granularity != RecomputeGranularity::full && !recompute_moe))
      << "--moe-router-load-balancing-type global_aux_loss with --recompute-granularity full or --recompute-modules "
         "moe is not supported yet";

}

MoeExpertsOptions ModelConfig::moe_experts_options() const {
  MoeExpertsOptions o;
  o.activation = activation == Activation::swiglu ? MoeExpertActivation::swiglu : MoeExpertActivation::pointwise;
  if (activation != Activation::swiglu) o.pointwise = pointwise_activation(activation);
  o.impl = moe.experts_impl;
  return o;
}

ModelConfig ModelConfig::shared_expert_config() const {
  ModelConfig c = *this;
  c.ffn_hidden_size = moe.shared_expert_intermediate_size / tensor_model_parallel_size;
  c.add_bias_linear = false;
  c.recompute_mlp = recompute_shared_experts;
  return c;
}

std::string expert_bias_name(int64_t layer) {
  return "decoder.layers." + std::to_string(layer) + ".mlp.router.expert_bias";
}

const char* MoeConfig::aux_loss_name() const {
  switch (load_balancing) {
    case MoeLoadBalancing::seq_aux_loss: return "seq_load_balancing_loss";
    case MoeLoadBalancing::global_aux_loss: return "global_load_balancing_loss";
    default: return "load_balancing_loss";
  }
}

void StageRange::validate(const ModelConfig& c) const {
  MT_CHECK(first_layer >= 0 && first_layer <= last_layer && last_layer <= c.num_layers)
      << "a stage's layers [" << first_layer << ", " << last_layer << ") must lie within the model's "
      << c.num_layers << " layers";
  MT_CHECK(num_layers() > 0 || embedding || head) << "a stage holds no layer, no embedding and no output layer";
}

PointwiseActivation pointwise_activation(Activation a) {
  switch (a) {
    case Activation::gelu: return PointwiseActivation::gelu;
    case Activation::gelu_tanh: return PointwiseActivation::gelu_tanh;
    case Activation::squared_relu: return PointwiseActivation::squared_relu;
    case Activation::swiglu: break;
  }
  MT_FAIL() << "SwiGLU is a gated activation, not a pointwise one";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::gelu: return "GeLU";
    case Activation::gelu_tanh: return "GeLU (tanh)";
    case Activation::swiglu: return "SwiGLU";
    case Activation::squared_relu: return "squared ReLU";
  }
  return "?";
}

const char* position_embedding_name(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::learned_absolute: return "learned positions";
    case PositionEmbedding::rope: return "RoPE";
    case PositionEmbedding::none: return "no position embedding";
  }
  return "?";
}

ModelConfig ModelConfig::tp_local() const {
  ModelConfig c = *this;
  c.num_attention_heads /= tensor_model_parallel_size;
  c.num_query_groups /= tensor_model_parallel_size;
  c.ffn_hidden_size /= tensor_model_parallel_size;
  if (moe.enabled()) c.moe.ffn_hidden_size /= moe.expert_tensor_parallel_size;
  return c;
}

int64_t ModelConfig::padded_vocab_size() const {
  const int64_t multiple = make_vocab_size_divisible_by * tensor_model_parallel_size;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

std::string ModelConfig::summary() const {
  std::ostringstream s;
  s << "layers " << num_layers << ", hidden " << hidden_size << ", ffn " << ffn_hidden_size << ", heads "
    << num_attention_heads << " (query groups " << num_query_groups << ", head dim " << kv_channels << "), seq "
    << seq_length << ", vocab " << vocab_size << " (padded " << padded_vocab_size() << "), "
    << (normalization == Normalization::layernorm ? "LayerNorm" : "RMSNorm")
    << (layernorm_zero_centered_gamma ? " (1 + w)" : "") << (qk_layernorm ? ", QK norm" : "") << ", "
    << activation_name(activation)
    << ", " << position_embedding_name(position_embedding_type);
  if (position_embedding_type == PositionEmbedding::rope && rotary_percent < 1.0)
    s << " on " << rotary_dim() << " of " << kv_channels << " head dims (--rotary-percent " << rotary_percent << ")";
  if (position_embedding_type == PositionEmbedding::rope && rotary_interleaved) s << " interleaved";
  s << (add_bias_linear ? ", bias" : ", no bias") << (untie_embeddings_and_output_weights ? ", untied" : ", tied")
    << ", " << dtype_name(params_dtype);
  if (moe.enabled()) {
    int64_t layers = 0;
    for (int64_t i = 0; i < num_layers; ++i) layers += mlp_kind(i) == MlpKind::moe;
    s << ", MoE in " << layers << " of " << num_layers << " layers: " << moe.num_experts << " experts (ffn "
      << moe.ffn_hidden_size << "), top-" << moe.router.topk
      << (moe.router.score_function == MoeScoreFunction::sigmoid ? " sigmoid" : " softmax");
    if (moe.shared_expert_intermediate_size > 0) s << ", shared expert " << moe.shared_expert_intermediate_size;
    if (moe.capacity.capacity_factor) s << ", capacity factor " << *moe.capacity.capacity_factor;
  }
  return s.str();
}

}  // namespace mt
