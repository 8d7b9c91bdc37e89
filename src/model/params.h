// Owns the GPT parameter layout of one stage (the whole model by default): every parameter's
// Megatron name (keyed by global layer index), shape, init rule and weight-decay flag; one
// contiguous value arena and one gradient arena with the same layout; and Megatron's init drawn
// from the counter-based generator keyed by (seed, name, global element index), so any split of
// the model into stages starts from the same weights.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/arena.h"
#include "model/config.h"
#include "model/layer.h"
#include "model/param_layout.h"
#include "parallel/shard.h"

namespace mt {

// normal: N(0, σ); scaled_normal: N(0, σ/√(2L)) for the output projections (attention proj, fc2).
enum class InitKind { normal, scaled_normal, ones, zeros };

// A parameter as the layout declares it, before any memory: what ParamStore allocates, and what
// offline tools (checkpoint conversion) enumerate without building a model.
struct ParamSpec {
  std::string name;
  Shape shape;  // whole
  InitKind init;
  ShardSpec shard;  // over tp; for expert weights see ShardRanks::of
  bool partial_over_tp = false;  // see Param::partial_over_tp
  bool shared_embedding = false;
  // A routed expert's weight [E, out, in]: split over the expert-parallel ranks (experts) or the
  // expert tensor-parallel ranks (its ShardSpec), its gradient reduced over expert-dp.
  bool expert = false;
};

// Which of a stage's parameters a ParamStore holds: all of them, the dense ones (gradients reduced
// over dp) or the routed experts' weights (reduced over expert-dp).
enum class ParamSet { all, dense, experts };

// This rank's place in the groups parameters are split over: dense tensors over tp by their
// ShardSpec; expert weights [E, out, in] over etp by theirs (fc1's rows, fc2's columns), of which
// each ep rank holds the E/ep experts of its own: a contiguous range of the etp shard (experts
// come first), so the split is still one ShardSpec plus an offset into the shard.
struct ShardRanks {
  int tp = 1, tp_rank = 0;
  int ep = 1, ep_rank = 0;
  int etp = 1, etp_rank = 0;
  // The split a parameter of `spec` gets here: the ShardSpec, the group size and this rank in it,
  // and (experts) how many leading experts of the shard the ep ranks before this one hold.
  struct Split {
    ShardSpec shard;
    int size = 1, rank = 0;
    int parts = 1;  // ep: the shard's experts in this many equal parts, this rank holding part `part`
    int part = 0;
    Shape local(const Shape& whole) const;
    int64_t offset(const Shape& whole) const { return part * local(whole).numel(); }  // in the shard
  };
  Split of(const ParamSpec& spec) const;
};

// Whether parameter `name` has a row per (padded) vocabulary entry: the word embedding and the
// untied output layer, whose padding rows depend on tp.
inline bool is_vocabulary_param(const std::string& name) {
  return name == "embedding.word_embeddings.weight" || name == "output_layer.weight";
}

// The parameters of `range` in registration order (embedding, layers, head).
std::vector<ParamSpec> param_specs(const ModelConfig& c, const StageRange& range);

// The group sizes of c's layout (ranks 0): enough for every shape.
ShardRanks shard_sizes(const ModelConfig& c);
// The expert weights' DDP settings: dense's over expert-dp, which holds dp·tp/(ep·etp) ranks
// (Megatron's expert grid: tp·dp = etp·ep·expert_dp).
DdpConfig expert_ddp(const ModelConfig& c, const DdpConfig& dense);

// The specs of `set` among `specs`.
std::vector<ParamSpec> param_subset(const std::vector<ParamSpec>& specs, ParamSet set);

// Where these parameters (this rank's shards; their sizes depend only on the group sizes of
// `ranks`) lie in the stage's value and gradient buffers under `ddp` (param_layout.h): what
// ParamStore allocates, and what plan/ counts.
DdpBufferLayout param_buffer_layout(const std::vector<ParamSpec>& specs, const DdpConfig& ddp, const ShardRanks& ranks);

struct Param;
// The word embedding (either stage's copy) or the output layer: Megatron's
// is_embedding_or_output_parameter, which --decoupled-lr applies to.
bool is_embedding_or_output(const Param& p);
// A query or key norm's weight or bias (--qk-layernorm), which --apply-wd-to-qk-layernorm decays.
bool is_qk_layernorm(const Param& p);

struct Param {
  std::string name;  // Megatron-Core name, e.g. decoder.layers.0.self_attention.linear_qkv.weight
  TensorView value;
  TensorView grad;
  InitKind init = InitKind::normal;
  bool weight_decay = true;  // Megatron excludes biases and 1-D (norm) parameters from decay
  Shape full_shape;          // the whole tensor; value/grad hold this rank's shard of it
  ShardSpec shard;           // how it is split over shard_size ranks, this one shard_rank
  int shard_size = 1, shard_rank = 0;  // the tensor-parallel group (dense) or etp (experts)
  int64_t shard_offset = 0;  // where value/grad start in that shard (experts: this ep rank's experts)
  // Held whole by every tp rank but computed on part of the rows (the norms on s/t tokens under
  // --sequence-parallel, the query and key norms on each rank's heads): the gradient is a partial
  // sum until it is all-reduced over the tp group.
  bool partial_over_tp = false;
  // The tied word embedding when the embedding and the output layer live on different stages:
  // the first stage's copy and the last stage's (its output layer). Their gradients are summed
  // over the embedding group so the copies stay identical (by the pipeline's gradient sync).
  bool shared_embedding = false;
  // Megatron's param.shared: the last stage's copy of the tied embedding, whose gradient (once
  // summed over the embedding group) the first stage's copy already counts in the gradient norm.
  bool shared = false;
  // Element offset of value and gradient in the store's buffers (ParamStore::layout()); the
  // optimizer lays its state out at the same offsets. -1: not in a store (made by hand).
  int64_t buffer_offset = -1;
  bool expert = false;  // a routed expert's weight (ParamSpec::expert)
};

// Whether this rank's copy of p is the one counted once in its group (gradient norm,
// checkpoint): its own shard, or rank 0's copy of a tensor every rank of the group holds whole
// (Megatron's param_is_not_tensor_parallel_duplicate); never the last stage's copy of a tied
// embedding (param_is_not_shared).
inline bool is_counted_copy(const Param& p) { return !p.shared && (p.shard.sharded() || p.shard_rank == 0); }

// Views of a stage's tensors by role (all values, or all gradients); shapes are this
// tensor-parallel rank's shards ([out/t, in] column-parallel, [out, in/t] row-parallel). Empty
// views for parameters the stage or the config does not have (the embedding off the first
// stage, the head off the last, biases, LayerNorm bias).
struct GptTensors {
  TensorView word_embeddings;                      // [V_padded/t, h]      (first stage)
  TensorView position_embeddings;                  // [max_pos, h] or empty (RoPE)
  std::vector<LayerWeights> layers;                // the stage's layers, first_layer first
  TensorView final_norm_weight, final_norm_bias;   // [h]                   (last stage)
  TensorView output_weight;                        // [V_padded/t, h]; the word embedding when tied
};

// The views of `range`'s parameters by role, each looked up by its Megatron name (empty where
// `find` has none).
GptTensors gpt_tensors(const ModelConfig& c, const StageRange& range,
                       const std::function<TensorView(const std::string&)>& find);
// The same with shapes (this tensor-parallel rank's shards) and dtype but no memory: what the
// stage's staging buffers are sized from before any parameter exists.
GptTensors param_shapes(const ModelConfig& c, const StageRange& range, const ShardRanks& ranks);

class ParamStore {
 public:
  // Holds tensor-parallel rank `tp_rank`'s shards (config.tensor_model_parallel_size ranks) of
  // the parameters of `range` (the whole model when not given), values and gradients each in one
  // buffer laid out as Megatron's DDP lays them out under `ddp` (param_layout.h).
  ParamStore(const ModelConfig& config, Backend& backend, MemoryTracker* tracker, int tp_rank = 0);
  ParamStore(const ModelConfig& config, StageRange range, Backend& backend, MemoryTracker* tracker, int tp_rank = 0,
             const DdpConfig& ddp = {});
  // The parameters of `set` only, split as `ranks` says.
  ParamStore(const ModelConfig& config, StageRange range, Backend& backend, MemoryTracker* tracker,
             const ShardRanks& ranks, const DdpConfig& ddp, ParamSet set);

  // Megatron's init for every parameter (layout-invariant: keyed by name and global index).
  void init(uint64_t seed);
  void zero_grads();

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  // The parameter of that name, or mt::Error listing what exists.
  Param& get(const std::string& name);
  int64_t numel() const;
  // Every gradient as one flat f32 view (the layout's padding stays zero), so one collective
  // moves them all; and the part of one bucket.
  TensorView grad_buffer() const { return grad_buffer_; }
  TensorView bucket_grads(size_t bucket) const;
  // The values likewise (the parameters' dtype).
  TensorView bucket_values(size_t bucket) const;
  const DdpBufferLayout& layout() const { return layout_; }
  // Indices [first, last) into params() of the embedding's parameters, global layer `layer`'s,
  // and the head's (final norm and output layer): the groups whose gradients a backward finishes
  // one after another.
  using IndexRange = std::pair<size_t, size_t>;
  IndexRange embedding_params() const { return {0, layer_begin_.front()}; }
  IndexRange layer_params(int64_t layer) const;
  IndexRange head_params() const { return {layer_begin_.back(), params_.size()}; }

  // Views by role, built once (they are read every step).
  const GptTensors& values() const { return values_; }
  const GptTensors& grads() const { return grads_; }
  const StageRange& range() const { return range_; }

 private:
  GptTensors collect(bool grads) const;

  const ModelConfig config_;
  const StageRange range_;
  Backend& backend_;
  ShardRanks ranks_;
  std::vector<Param> params_;
  DdpBufferLayout layout_;
  std::vector<size_t> layer_begin_;  // index of each layer's first parameter, then the head's
  std::unique_ptr<Arena> value_arena_;
  std::unique_ptr<Arena> grad_arena_;
  TensorView value_buffer_;  // [layout_.numel] in the parameters' dtype
  TensorView grad_buffer_;   // f32 [layout_.numel]
  GptTensors values_, grads_;
};

}  // namespace mt
