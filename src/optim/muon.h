// Owns Muon's matrix step as Megatron runs it (TensorParallelMuon, emerging_optimizers): its
// settings and the orthogonalised update of each matrix of a parameter (model/muon_matrices.h):
// this rank's piece gathered whole over the group that splits it (tp; etp for experts), the
// Newton–Schulz iteration on the whole, scaled, and this rank's piece taken back.
// Every rank of the group runs the same iteration (Megatron's "duplicated" mode), so the update
// is the same on every layout.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/arena.h"
#include "backend/muon_args.h"
#include "comm/communicator.h"
#include "model/muon_matrices.h"
#include "model/params.h"

namespace mt {

enum class MuonScaleMode { spectral, unit_rms_norm, shape_scaling };
// blockwise: each rank orthogonalises its own piece (the update depends on the layout);
// duplicated and distributed: the whole matrix (distributed splits Megatron's work over the
// group, with the same result; here it runs as duplicated).
enum class MuonTpMode { blockwise, duplicated, distributed };

struct MuonConfig {
  float momentum = 0.9f;        // --muon-momentum (Megatron's flag default)
  bool nesterov = false;        // --muon-nesterov
  bool split_qkv = true;        // off with --muon-no-split-qkv
  MuonScaleMode scale_mode = MuonScaleMode::spectral;
  bool bf16_iteration = true;   // --muon-fp32-matmul-prec medium (high: f32)
  std::string coefficient_type = "quintic";
  int num_ns_steps = 5;
  MuonTpMode tp_mode = MuonTpMode::duplicated;
  float extra_scale_factor = 1.0f;
};

// The (a, b, c) of each of `steps` Newton–Schulz iterations for a coefficient set of
// emerging_optimizers (simple, quintic, polar_express, cans, aol, deepseekv4, cubic5): the set's
// iterations cycled, or its last one repeated (polar_express, cans, deepseekv4). mt::Error for an
// unknown name, steps < 1, or cubic5 with other than its 5 steps.
std::vector<NewtonSchulzStep> newton_schulz_steps(const std::string& type, int steps);
std::string newton_schulz_types();  // "simple|quintic|..."

// The update's scale for a whole matrix [out, in]: spectral √max(out, in), unit_rms_norm
// √(out/in), shape_scaling √max(1, out/in).
double muon_scale_factor(int64_t out, int64_t in, MuonScaleMode mode);

// Muon's matrices among a store's parameters (model/muon_matrices.h).
inline bool is_muon_param(const Param& p) { return is_muon_matrix(p.name, p.full_shape, p.expert); }

struct MuonSetup {
  MuonConfig config;
  Communicator* tp = nullptr;   // dense matrices split over tensor-parallel ranks (null: none)
  Communicator* etp = nullptr;  // the experts' matrices
  QkvRows qkv;                  // needed for split_qkv
  MuonGeometry geometry() const { return {config.split_qkv, config.tp_mode == MuonTpMode::blockwise, qkv}; }
};

// The orthogonalised updates of the parameters it was built for, with scratch sized for the
// largest of them (category optimizer).
class MuonOrthogonalizer {
 public:
  MuonOrthogonalizer(const MuonSetup& setup, const std::vector<const Param*>& params, Backend& backend,
                     MemoryTracker* tracker);
  // update (p's local shape, f32) = the scaled orthogonalised u of every matrix of p; a collective
  // over each matrix's group.
  void orthogonalize(const Param& p, const TensorView& u, const TensorView& update);
  // Scratch for a parameter's momentum input and update (update() after momentum()).
  TensorView momentum_scratch(int64_t numel) const { return momentum_.rows(0, numel); }
  TensorView update_scratch(int64_t numel) const { return update_.rows(0, numel); }
  const MuonConfig& config() const { return setup_.config; }

 private:
  MuonSetup setup_;
  std::unordered_map<const Param*, std::vector<MuonMatrix>> matrices_;  // of each parameter, made once
  std::vector<NewtonSchulzStep> steps_;
  std::unique_ptr<Arena> arena_;
  TensorView momentum_, update_, local_, gathered_, whole_, workspace_;
};

}  // namespace mt
