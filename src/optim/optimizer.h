// Owns the optimizer state and step for the parameters of a ParamStore: fp32 Adam moments (Muon's
// momentum for its matrices under --optimizer muon) and, for 16-bit parameters, fp32 main
// parameters in one arena (category "optimizer"), each laid out parallel to the gradient buffer
// (Param::buffer_offset), or under the distributed optimizer parallel to this rank's shards of
// the buckets, one after another; the global gradient L2 norm, Megatron's clipping, and AdamW
// with Megatron's weight-decay exclusions (biases and 1-D parameters are not decayed), Muon
// (optim/muon.h) for the matrices when asked. Gradients are always f32.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backend/arena.h"
#include "comm/communicator.h"
#include "model/params.h"
#include "ops/adamw.h"
#include "optim/muon.h"

namespace mt {

struct OptimizerConfig {
  float lr = 1e-4f;
  float weight_decay = 0.01f;  // --weight-decay
  float adam_beta1 = 0.9f;
  float adam_beta2 = 0.999f;
  float adam_eps = 1e-8f;
  float clip_grad = 1.0f;      // --clip-grad; 0 disables clipping
  // --apply-wd-to-qk-layernorm (Qwen3-Next): the query and key norms' weights and biases decay too.
  bool apply_wd_to_qk_layernorm = false;
  // --optimizer muon: Muon for the matrices (is_muon_param), Adam for the rest (Megatron's
  // --muon-scalar-optimizer adam); the Optimizer is built with it (MuonSetup).
  std::optional<MuonConfig> muon;
};

// L2 norm of all gradients of the model, each parameter counted once: sums of squares in
// double, over this rank's shards and, for parameters every rank of their group holds whole, on
// its rank 0 only (is_counted_copy); then summed over `model_parallel` (the tp-pp group; null:
// this rank alone).
double grad_norm(const std::vector<Param>& params, Communicator* model_parallel = nullptr);

// Megatron's clip coefficient: min(1, clip_grad / (norm + 1e-6)), or 1 when clip_grad <= 0.
double clip_coefficient(double norm, double clip_grad);

// Megatron's clip: when clip_grad > 0 and coeff = clip_grad / (norm + 1e-6) < 1, scale every
// gradient by coeff. Returns the coefficient applied (1 when none).
double clip_grads(const std::vector<Param>& params, double norm, double clip_grad);

// The distributed optimizer (--use-distributed-optimizer, ZeRO-1): this data-parallel rank
// updates, and keeps state for, only DdpBucket::shard(dp rank) of every bucket of `layout` (the
// parameters' ParamStore::layout()); the gradient norm's partial sums are added over `dp`.
struct DistributedShard {
  const DdpBufferLayout* layout = nullptr;  // null: every rank updates every parameter
  Communicator* dp = nullptr;
};

// One ParamStore's parameters (a model chunk's dense parameters, or its experts') and how they
// are sharded; their squared gradient norm is summed over shard.dp (distributed optimizer) and
// then over norm_group: the Optimizer's model_parallel group when null (dense parameters), the
// etp × ep × pp group for experts (whose copies repeat only over expert-dp).
struct OptimizedParams {
  std::vector<Param>* params = nullptr;
  DistributedShard shard;
  Communicator* norm_group = nullptr;
};

class Optimizer {
 public:
  // model_parallel and tp_rank: the group the gradient norm is summed over and this rank's tp
  // rank (see grad_norm).
  Optimizer(std::vector<Param>& params, Backend& backend, MemoryTracker* tracker, Communicator* model_parallel = nullptr,
            const DistributedShard& shard = {}, const MuonSetup* muon = nullptr)
      : Optimizer(std::vector<OptimizedParams>{{&params, shard}}, backend, tracker, model_parallel, muon) {}
  // Several chunks' parameters (interleaved pipeline stages, expert weights) under one step and
  // one gradient norm; their state lies in one arena, chunk after chunk. muon: Muon for the
  // matrices, with its settings.
  Optimizer(const std::vector<OptimizedParams>& chunks, Backend& backend, MemoryTracker* tracker,
            Communicator* model_parallel = nullptr, const MuonSetup* muon = nullptr);

  struct StepResult {
    double grad_norm = 0.0;  // of the unscaled gradients, before clipping
    bool found_inf = false;  // a gradient was inf/NaN: nothing was updated
  };
  // One step (of this rank's shard under the distributed optimizer, whose gradients must be
  // reduced and whose updated values gathered around it: DataParallelSync): global norm of the
  // gradients unscaled by 1/loss_scale (a non-finite norm skips the
  // step, as Megatron's found_inf does), clip, AdamW update of the f32 main parameters at
  // learning rate `lr` and weight decay `weight_decay` (the schedules decide both), and copy them
  // into the 16-bit model parameters. Two passes over the gradients (norm; fused unscale + clip +
  // update + copy), each one multi-tensor launch, bit for bit the separate passes' result; the
  // gradients are only read. Muon's matrices then take its step (a collective over tp, etp and,
  // under the distributed optimizer, dp).
  // embedding_or_output_lr: the word embedding's and output layer's own rate (--decoupled-lr).
  StepResult step(const OptimizerConfig& config, float lr, float weight_decay, float loss_scale = 1.0f,
                  std::optional<float> embedding_or_output_lr = std::nullopt);
  // --log-params-norm: the L2 norm of the parameters (the f32 main copies of 16-bit ones, as
  // Megatron's calc_params_l2_norm), each counted once and summed over the groups the gradient
  // norm is; a collective over them. Call it on every rank after step().
  double params_norm();

  // The part [begin, end) of a parameter (flat) that this rank updates, and its state. The
  // parameter's value and gradient views are read at every step (a caller may repoint them).
  struct Segment {
    const Param* param = nullptr;  // into a ParamStore's params(), which never grows after construction
    int64_t begin = 0, end = 0;
    // Adam: m and v its moments; Muon: m its momentum buffer, v empty. main: the f32 master copy
    // (empty when the parameter is f32).
    TensorView m, v, main;
    size_t norm = 0;  // its NormGroup
    bool muon = false;
  };
  // This rank's state, piece by piece (checkpoints save and restore it in place).
  const std::vector<Segment>& segments() const { return segments_; }

  int64_t steps() const { return step_; }
  void set_steps(int64_t steps) { step_ = steps; }  // a restored checkpoint's
  // Elements of parameters this rank updates (and keeps state for).
  int64_t state_numel() const { return state_numel_; }

 private:
  TensorView grad_of(const Segment& s) const;
  TensorView value_of(const Segment& s) const;
  // The L2 norm of the counted gradients (scaled by `unscale`) or parameter values, over every
  // rank that holds a part of them.
  double global_norm(bool values, float unscale);
  // Muon's step of every Muon segment: momentum, then each matrix orthogonalised whole (under the
  // distributed optimizer the momenta of a bucket are first gathered over dp), then the update.
  void muon_step(float lr, float weight_decay, float unscale, float clip);
  void muon_apply_to(const Segment& s, const TensorView& update, float lr, float weight_decay);

  // Where partial sums of the squared norm go: the distributed optimizer's group (or null), then
  // the group the parameters differ over. Chunks with the same pair share one.
  struct NormGroup {
    Communicator* dp = nullptr;
    Communicator* model = nullptr;
  };
  std::vector<NormGroup> norm_groups_;
  std::unique_ptr<Arena> state_;
  int64_t state_numel_ = 0;
  std::vector<Segment> segments_;
  int64_t step_ = 0;
  // Reused by every step (sized by the first): the multi-tensor launches' argument lists and the
  // norm's per-chunk partial sums.
  std::vector<TensorView> norm_tensors_;
  std::vector<double> norm_sums_, norm_scratch_, group_sums_;
  std::vector<size_t> norm_group_of_;  // per entry of norm_tensors_
  std::vector<AdamWTensor> update_, decoupled_update_;

  // What the Muon step walks: each chunk's parameters, how they are sharded, which of them Muon
  // updates, and the segment of each parameter on this rank (-1: none).
  struct Chunk {
    const std::vector<Param>* params = nullptr;
    DistributedShard shard;
    bool distributed = false;
    std::vector<bool> muon;
    std::vector<int> segment_of;
  };
  std::vector<Chunk> chunks_;
  std::unique_ptr<MuonOrthogonalizer> muon_;
  TensorView muon_bucket_;  // a bucket's momenta gathered over dp (distributed optimizer)
};

}  // namespace mt
