// Owns ModelConfig: the shape and options of a GPT-family model, named as Megatron-LM's flags,
// with validation that turns every inconsistency into one clear message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/attention_args.h"
#include "backend/moe_experts_args.h"
#include "backend/moe_router_args.h"
#include "parallel/cp_comm_type.h"
#include "base/dtype.h"

namespace mt {

// none: neither a position table nor RoPE (NoPE; Mamba hybrids). Checkpoints record the value: append only.
enum class PositionEmbedding { learned_absolute, rope, none };
enum class Normalization { layernorm, rmsnorm };
// gelu: exact erf form (Megatron's default F.gelu); gelu_tanh: --openai-gelu (GPT-2's form);
// swiglu: --swiglu; squared_relu: --squared-relu.  Checkpoints record the value: append only.
enum class Activation { gelu, gelu_tanh, swiglu, squared_relu };
// The kernel form of a pointwise activation (every one but swiglu).
PointwiseActivation pointwise_activation(Activation a);
// "GeLU", "GeLU (tanh)", "SwiGLU", "squared ReLU": for logs and messages.
const char* activation_name(Activation a);
// "learned positions", "RoPE", "no position embedding": for logs and messages.
const char* position_embedding_name(PositionEmbedding p);
// flash: online softmax, keeps no [s, s] tensor; unfused: Megatron's local attention that stores
// the probabilities (--attention-backend flash | unfused).
enum class AttentionImpl { flash, unfused };
// Megatron's activation recomputation (--recompute-granularity, --recompute-method):
// selective recomputes the modules of --recompute-modules (default: the attention core, whose
// probabilities the flash path never stores anyway); full keeps only the inputs of the chosen
// layers and reruns their forward.
enum class RecomputeGranularity { none, selective, full };
// uniform: all layers, in groups of recompute_num_layers; block: the first recompute_num_layers
// (of each stage, as Megatron applies the method to each pipeline chunk's own layers).
enum class RecomputeMethod { uniform, block };
// The MLP block of a transformer layer: dense (Megatron's MLP) or a mixture of experts (MoELayer).
enum class MlpKind { dense, moe };
// The MLP block kinds some buffer must serve: one layer's, or the union over several layers (a
// scratch or a pool entry that layers of both kinds share).
struct MlpKinds {
  bool dense = false, moe = false;
  MlpKinds operator|(MlpKinds o) const { return {dense || o.dense, moe || o.moe}; }
};
// --moe-router-load-balancing-type (sinkhorn balances the routing itself and has no loss).
enum class MoeLoadBalancing { aux_loss, seq_aux_loss, global_aux_loss, none, sinkhorn };
// --moe-token-dispatcher-type.
enum class MoeDispatcher { allgather, alltoall };

// The mixture-of-experts options, named as Megatron's --moe-* flags. num_experts = 0: a dense model.
struct MoeConfig {
  int64_t num_experts = 0;                      // --num-experts
  // --moe-layer-freq: an integer N (layer i is MoE when i % N == 0) or a list of 0/1 per layer;
  // finalize() expands it into layer_is_moe.
  std::string layer_freq = "1";
  std::vector<uint8_t> layer_is_moe;            // [num_layers], after finalize()
  int64_t ffn_hidden_size = 0;                  // --moe-ffn-hidden-size; 0 = --ffn-hidden-size
  int64_t shared_expert_intermediate_size = 0;  // --moe-shared-expert-intermediate-size; 0 = none
  MoeRouterOptions router;                      // --moe-router-topk, -score-function, -pre-softmax, ...
                                                // (router.sinkhorn follows load_balancing in finalize())
  MoeCapacityOptions capacity;                  // --moe-expert-capacity-factor, -pad-..., -token-drop-policy
  MoeLoadBalancing load_balancing = MoeLoadBalancing::aux_loss;
  double aux_loss_coeff = 0.0;                  // --moe-aux-loss-coeff
  double z_loss_coeff = 0.0;                    // --moe-z-loss-coeff; 0 = no z-loss
  bool expert_bias = false;                     // --moe-router-enable-expert-bias
  float bias_update_rate = 1e-3f;               // --moe-router-bias-update-rate
  // --moe-router-dtype fp32: the router's logits stay f32 under --bf16/--fp16 (otherwise they are
  // rounded to the activation dtype, as Megatron's router GEMM in 16 bits gives them).
  bool router_fp32 = false;
  MoeExpertsImpl experts_impl = MoeExpertsImpl::sequential;  // --moe-grouped-gemm: grouped
  MoeDispatcher dispatcher = MoeDispatcher::allgather;
  int64_t expert_model_parallel_size = 1;       // --expert-model-parallel-size
  int64_t expert_tensor_parallel_size = 0;      // --expert-tensor-parallel-size; 0 = tp

  bool enabled() const { return num_experts > 0; }
  bool aux_loss() const {
    return load_balancing != MoeLoadBalancing::none && load_balancing != MoeLoadBalancing::sinkhorn &&
           aux_loss_coeff > 0.0;
  }
  // Megatron's names of the losses in the log (each logged divided by its coefficient).
  const char* aux_loss_name() const;
};

// The checkpoint name of layer i's router bias (--moe-router-enable-expert-bias), as Megatron's.
std::string expert_bias_name(int64_t layer);

struct ModelConfig {
  int64_t num_layers = 2;               // --num-layers
  int64_t hidden_size = 64;             // --hidden-size
  int64_t ffn_hidden_size = 0;          // --ffn-hidden-size; 0 = 4h (or Megatron's SwiGLU rule)
  int64_t num_attention_heads = 4;      // --num-attention-heads
  int64_t num_query_groups = 0;         // --num-query-groups (with --group-query-attention); 0 = heads
  int64_t kv_channels = 0;              // --kv-channels; 0 = hidden / heads
  int64_t seq_length = 128;             // --seq-length
  int64_t max_position_embeddings = 0;  // --max-position-embeddings; 0 = seq_length
  PositionEmbedding position_embedding_type = PositionEmbedding::learned_absolute;
  double rotary_base = 10000.0;         // --rotary-base
  // --rotary-percent: RoPE turns the first rotary_dim() elements of each query and key head, the
  // rest pass through unrotated (Megatron's RotaryEmbedding(kv_channels, rotary_percent)).
  double rotary_percent = 1.0;
  bool rotary_interleaved = false;      // --rotary-interleaved: pairs (2i, 2i+1), not (i, i + r/2)
  Normalization normalization = Normalization::layernorm;
  float norm_epsilon = 1e-5f;           // --norm-epsilon
  // --apply-layernorm-1p (Megatron's layernorm_zero_centered_gamma): every norm scales by 1 + weight,
  // and its weights start at 0, so weight decay pulls the scale toward 1.
  bool layernorm_zero_centered_gamma = false;
  // --qk-layernorm (Qwen3; Megatron's q_layernorm / k_layernorm): every query and key head is
  // normalised over its head dim by the config's norm, with a weight [d] of its own per layer,
  // before RoPE.
  bool qk_layernorm = false;
  Activation activation = Activation::gelu;
  bool add_bias_linear = true;          // --disable-bias-linear clears it
  float hidden_dropout = 0.1f;          // --hidden-dropout
  float attention_dropout = 0.1f;       // --attention-dropout
  float init_method_std = 0.02f;        // --init-method-std
  int64_t vocab_size = 0;               // from the tokenizer, or --vocab-size
  int64_t make_vocab_size_divisible_by = 128;
  bool untie_embeddings_and_output_weights = false;
  AttentionImpl attention_impl = AttentionImpl::flash;
  // --bf16 / --fp16: parameters and saved activations in 16 bits (arithmetic in f32 on CPU, with
  // every stored value rounded as the 16-bit format rounds it); gradients and the optimizer's
  // main parameters stay f32.
  DType params_dtype = DType::f32;
  RecomputeGranularity recompute_granularity = RecomputeGranularity::none;
  RecomputeMethod recompute_method = RecomputeMethod::uniform;
  int64_t recompute_num_layers = 1;     // --recompute-num-layers
  // --recompute-modules, under selective granularity. The norm outputs ("layernorm") and the
  // experts' activation output ("moe_act") are always recomputed here. recompute_mlp ("mlp", dense
  // layers) drops fc1's output from the saved activations; the backward reruns fc1 (one GEMM, and
  // under sequence parallelism its all-gather) from the remade norm output. recompute_shared_experts
  // ("shared_experts") does the same for an MoE layer's shared expert; recompute_moe ("moe") keeps
  // nothing of an MoE block (router, dispatch, experts) and reruns its forward, communication
  // included, before its backward.
  bool recompute_core_attn = true;
  bool recompute_mlp = false;
  bool recompute_shared_experts = false;
  bool recompute_moe = false;
  // Tensor parallelism: heads, query groups, the MLP and the vocabulary are split over this many
  // ranks; with sequence_parallel the norms, dropout and residual adds run on s/t tokens each.
  int64_t tensor_model_parallel_size = 1;  // --tensor-model-parallel-size
  bool sequence_parallel = false;          // --sequence-parallel
  // Context parallelism: each rank holds 2 of the sequence's 2·cp chunks (parallel/context_parallel.h)
  // and every layer but attention runs on its seq_length/cp tokens.
  int64_t context_parallel_size = 1;           // --context-parallel-size
  CpCommType cp_comm_type = CpCommType::p2p;   // --cp-comm-type
  MoeConfig moe;

  // Fills the 0 = "derive it" fields the way Megatron does, then validates. Throws mt::Error.
  void finalize();

  // Derived sizes (valid after finalize()).
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by · tp, so the padded
  // size (and with it the model) depends on the tensor-parallel size unless the vocabulary is
  // already such a multiple.
  int64_t padded_vocab_size() const;
  // Tokens of a sequence on one context-parallel rank.
  int64_t local_seq_length() const { return seq_length / context_parallel_size; }
  int64_t qkv_size() const { return (num_attention_heads + 2 * num_query_groups) * kv_channels; }
  int64_t attention_size() const { return num_attention_heads * kv_channels; }
  int64_t fc1_size() const { return activation == Activation::swiglu ? 2 * ffn_hidden_size : ffn_hidden_size; }
  bool has_position_table() const { return position_embedding_type == PositionEmbedding::learned_absolute; }
  // RoPE's rotated width r: Megatron's int(kv_channels · rotary_percent) below 1.0, the head dim at 1.0.
  int64_t rotary_dim() const {
    return rotary_percent < 1.0 ? static_cast<int64_t>(static_cast<double>(kv_channels) * rotary_percent) : kv_channels;
  }
  // Columns of the RoPE cos/sin tables: the rotated pairs, ceil(r / 2) (Megatron's arange(0, r, 2)).
  int64_t rope_table_width() const { return (rotary_dim() + 1) / 2; }
  RopeForm rope_form() const { return rotary_interleaved ? RopeForm::interleaved : RopeForm::rotate_half; }
  // The shape one tensor-parallel rank computes: heads, query groups and the MLP width divided by
  // tp (the layer code runs on this config); hidden size, head dimension and the rest unchanged.
  ModelConfig tp_local() const;
  // The MLP block kind of global layer `layer`.
  MlpKind mlp_kind(int64_t layer) const {
    return moe.enabled() && moe.layer_is_moe[static_cast<size_t>(layer)] ? MlpKind::moe : MlpKind::dense;
  }
  // The kinds among global layers [first, last).
  MlpKinds mlp_kinds(int64_t first, int64_t last) const {
    MlpKinds kinds;
    for (int64_t i = first; i < last; ++i) kinds = kinds | (mlp_kind(i) == MlpKind::moe ? MlpKinds{false, true} : MlpKinds{true, false});
    return kinds;
  }
  // The routed experts' fc1 output width: 2·moe_ffn (SwiGLU: [gate | up]) or moe_ffn.
  int64_t moe_fc1_size() const { return activation == Activation::swiglu ? 2 * moe.ffn_hidden_size : moe.ffn_hidden_size; }
  // The options of the expert MLP ops (activation, GeLU form, grouped or sequential).
  MoeExpertsOptions moe_experts_options() const;
  // The shared expert as one tensor-parallel rank's dense MLP: this config with
  // --moe-shared-expert-intermediate-size / tp as its ffn width, no biases.
  ModelConfig shared_expert_config() const;

  std::string summary() const;

 private:
  void finalize_moe();
};

// The part of the model one Stage holds: the global layers [first_layer, last_layer), plus the
// embedding on the first pipeline stage (Megatron's pre_process) and the final norm, output
// layer and loss on the last (post_process). Names, init and dropout stay keyed by global layer.
struct StageRange {
  int64_t first_layer = 0;
  int64_t last_layer = 0;
  bool embedding = true;
  bool head = true;

  static StageRange whole(const ModelConfig& c) { return {0, c.num_layers, true, true}; }
  int64_t num_layers() const { return last_layer - first_layer; }
  // Throws mt::Error unless the range lies within the model's layers.
  void validate(const ModelConfig& c) const;
};

}  // namespace mt
