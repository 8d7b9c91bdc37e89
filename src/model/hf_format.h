// Owns the Hugging Face side of checkpoint conversion: the two architectures megatron.cpp exports
// and imports, their config.json, and the map from each Megatron parameter (a whole tensor) to the
// HF tensors it is made of.
//   GPT2LMHeadModel:  LayerNorm, learned positions, GeLU (gelu_new = tanh form, or exact), biases;
//                     its Conv1D weights are stored [in, out].
//   LlamaForCausalLM: RMSNorm, RoPE (HF's rotate-half form, which Megatron uses too, so no
//                     permutation of q and k), SwiGLU, grouped-query attention, optional biases.
//                     Its attention rotates whole heads: models trained with --rotary-percent
//                     below 1 or --rotary-interleaved are refused, naming the flag.
//   MixtralForCausalLM: Llama's attention with every MLP a dropless top-k mixture of SwiGLU
//                     experts, softmax over the chosen k; Megatron's stacked experts.linear_fc1
//                     [E, 2f, h] is each expert's w1 (gate) then w3 (up), linear_fc2 [E, h, f] its w2.
//   Qwen3ForCausalLM: Llama without biases, plus an RMSNorm on every query and key head before
//                     RoPE (--qk-layernorm: q_norm, k_norm).
//   Qwen3MoeForCausalLM: Qwen3's attention with every MLP a dropless top-k mixture like Mixtral's
//                     (mlp.gate, mlp.experts.N.gate_proj/up_proj/down_proj), the chosen k
//                     renormalised (norm_topk_prob) or not (--moe-router-pre-softmax).
// Megatron's fused linear_qkv holds, per query group, its n/g query heads, then the group's key
// head, then its value head; HF keeps q, k and v apart (Llama) or concatenated as [q | k | v]
// (GPT-2's c_attn). SwiGLU's linear_fc1 is [gate; up] (HF's gate_proj and up_proj). Megatron's
// vocabulary tensors have padding rows that HF's lack. Every map is a pure permutation (copies,
// no arithmetic), so import after export gives back the same bits.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace mt {

enum class HfArchitecture { gpt2, llama, mixtral, qwen3, qwen3_moe };

// The HF architecture of c (finalized), or mt::Error naming what neither has.
HfArchitecture hf_architecture_of(const ModelConfig& c);
const char* hf_architecture_name(HfArchitecture a);  // "GPT2LMHeadModel", "LlamaForCausalLM", ...
// config.json of c, its tensors stored in `dtype` (f32, bf16 or f16).
nlohmann::json hf_config(const ModelConfig& c, DType dtype);
// The model config.json describes, not finalized (the caller sets the layout first). mt::Error
// naming `path` and the field for anything we do not implement (rope scaling, other activations,
// another model type, ...).
ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& path);
// The dtype a config.json's "torch_dtype" names; f32 when it names none.
DType hf_torch_dtype(const nlohmann::json& config);

struct HfTensor {
  std::string name;
  Shape shape;
};

// How one Megatron parameter (whole, all tensor-parallel shards together) becomes HF tensors.
class HfParamMap {
 public:
  // c finalized; `name` and `shape` a parameter of c (model/params.h's param_specs).
  HfParamMap(const ModelConfig& c, const std::string& name, const Shape& shape);

  const std::vector<HfTensor>& hf_tensors() const { return hf_; }
  // The Megatron tensor without vocabulary padding (the rows HF has).
  const Shape& megatron_shape() const { return megatron_; }
  // `megatron`: at least megatron_shape().numel() elements (the padded tensor's leading rows are
  // the unpadded one); out[i] receives hf_tensors()[i]. `scratch` is resized as needed.
  void to_hf(const float* megatron, const std::vector<float*>& out, std::vector<float>& scratch) const;
  // The inverse: megatron_shape().numel() elements written.
  void from_hf(const std::vector<const float*>& in, float* megatron, std::vector<float>& scratch) const;

 private:
  void name_tensors(const ModelConfig& c, const std::string& name, const Shape& shape);
  int64_t hf_row(int64_t megatron_row) const;  // where a row of the Megatron tensor goes in HF's concatenation

  std::vector<HfTensor> hf_;
  Shape megatron_;
  bool qkv_rows_ = false;   // rows grouped Megatron's way (per query group), HF's by q, k, v
  bool transpose_ = false;  // GPT-2's Conv1D: HF stores the transpose
  int64_t heads_ = 0, groups_ = 0, head_dim_ = 0;
};

}  // namespace mt
