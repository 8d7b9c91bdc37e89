#include "model/config.h"

#include <algorithm>
#include <sstream>

#include "base/error.h"

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
  MT_CHECK(!sequence_parallel || seq_length % tp == 0)
      << "--sequence-parallel splits the sequence over the tensor-parallel ranks: --seq-length " << seq_length
      << " is not divisible by --tensor-model-parallel-size " << tp;
  if (position_embedding_type == PositionEmbedding::learned_absolute) {
    MT_CHECK(seq_length <= max_position_embeddings)
        << "--seq-length " << seq_length << " exceeds --max-position-embeddings " << max_position_embeddings;
  } else {
    MT_CHECK(kv_channels % 2 == 0) << "RoPE needs an even head dimension, got --kv-channels " << kv_channels;
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
  MT_CHECK(!recompute_mlp || recompute_granularity == RecomputeGranularity::selective)
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
}

void StageRange::validate(const ModelConfig& c) const {
  MT_CHECK(first_layer >= 0 && first_layer <= last_layer && last_layer <= c.num_layers)
      << "a stage's layers [" << first_layer << ", " << last_layer << ") must lie within the model's "
      << c.num_layers << " layers";
  MT_CHECK(num_layers() > 0 || embedding || head) << "a stage holds no layer, no embedding and no output layer";
}

ModelConfig ModelConfig::tp_local() const {
  ModelConfig c = *this;
  c.num_attention_heads /= tensor_model_parallel_size;
  c.num_query_groups /= tensor_model_parallel_size;
  c.ffn_hidden_size /= tensor_model_parallel_size;
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
    << (normalization == Normalization::layernorm ? "LayerNorm" : "RMSNorm") << ", "
    << (activation == Activation::swiglu ? "SwiGLU" : activation == Activation::gelu_tanh ? "GeLU(tanh)" : "GeLU")
    << ", " << (position_embedding_type == PositionEmbedding::rope ? "RoPE" : "learned positions")
    << (add_bias_linear ? ", bias" : ", no bias") << (untie_embeddings_and_output_weights ? ", untied" : ", tied")
    << ", " << dtype_name(params_dtype);
  return s.str();
}

}  // namespace mt
