// Owns ModelConfig: the shape and options of a GPT-family model, named as Megatron-LM's flags,
// with validation that turns every inconsistency into one clear message.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"

namespace mt {

enum class PositionEmbedding { learned_absolute, rope };
enum class Normalization { layernorm, rmsnorm };
// gelu: exact erf form (Megatron's default F.gelu); gelu_tanh: --openai-gelu (GPT-2's form);
// swiglu: --swiglu.
enum class Activation { gelu, gelu_tanh, swiglu };
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
// The MLP block of a transformer layer: dense (Megatron's MLP). MoE joins here.
enum class MlpKind { dense };

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
  Normalization normalization = Normalization::layernorm;
  float norm_epsilon = 1e-5f;           // --norm-epsilon
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
  // --recompute-modules, under selective granularity. The norm outputs ("layernorm") are always
  // recomputed here. recompute_mlp drops fc1's output from the saved activations; the backward
  // reruns fc1 (one GEMM, and under sequence parallelism its all-gather) from the remade norm output.
  bool recompute_core_attn = true;
  bool recompute_mlp = false;
  // Tensor parallelism: heads, query groups, the MLP and the vocabulary are split over this many
  // ranks; with sequence_parallel the norms, dropout and residual adds run on s/t tokens each.
  int64_t tensor_model_parallel_size = 1;  // --tensor-model-parallel-size
  bool sequence_parallel = false;          // --sequence-parallel

  // Fills the 0 = "derive it" fields the way Megatron does, then validates. Throws mt::Error.
  void finalize();

  // Derived sizes (valid after finalize()).
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by · tp, so the padded
  // size (and with it the model) depends on the tensor-parallel size unless the vocabulary is
  // already such a multiple.
  int64_t padded_vocab_size() const;
  int64_t qkv_size() const { return (num_attention_heads + 2 * num_query_groups) * kv_channels; }
  int64_t attention_size() const { return num_attention_heads * kv_channels; }
  int64_t fc1_size() const { return activation == Activation::swiglu ? 2 * ffn_hidden_size : ffn_hidden_size; }
  bool has_position_table() const { return position_embedding_type == PositionEmbedding::learned_absolute; }
  // The shape one tensor-parallel rank computes: heads, query groups and the MLP width divided by
  // tp (the layer code runs on this config); hidden size, head dimension and the rest unchanged.
  ModelConfig tp_local() const;
  // The MLP block kind of global layer `layer`.
  MlpKind mlp_kind(int64_t layer) const { return MlpKind::dense; }

  std::string summary() const;
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
