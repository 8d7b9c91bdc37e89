// Owns the geometry of Muon's matrices (Megatron's TensorParallelMuon), apart from running it
// (optim/muon.h) so that plan/ can size its state and scratch: which parameters Muon updates, the
// matrices a parameter's local tensor holds (a routed expert's weight one per expert; the fused
// QKV its Q, K and V rows under --muon-split-qkv), the group each is split over and how, and the
// scratch the largest of them needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/shard.h"
#include "tensor/tensor.h"

namespace mt {

// Megatron's default split: Muon updates the 2-D weights (and each routed expert's matrix) other
// than the word embedding and the output layer; the rest (norms, biases, embeddings) gets Adam.
bool is_muon_matrix(const std::string& name, const Shape& whole, bool expert);

// The rows of the fused QKV per query group: Megatron's qkv_split_shapes.
struct QkvRows {
  int64_t q = 0, k = 0, v = 0;
};

struct ModelConfig;
// c's (finalized: query groups and head width set).
QkvRows muon_qkv_rows(const ModelConfig& c);

// Where Muon's settings change a matrix's geometry.
struct MuonGeometry {
  bool split_qkv = true;   // off with --muon-no-split-qkv
  bool blockwise = false;  // --muon-tp-mode blockwise: each rank's piece alone, nothing gathered
  QkvRows qkv;
};

// The group a matrix is split over: none, the tensor-parallel ranks, or (experts) the expert
// tensor-parallel ranks.
enum class MuonGroup { none, tp, etp };

// One matrix inside a parameter's local tensor: `blocks` blocks of `rows` rows (width `cols`),
// block b starting at row b·period + row_offset after element `base`; gathered whole over
// `group_size` ranks of `group` along `partition_dim` (0: rows, 1: columns) unless group_size is 1.
struct MuonMatrix {
  int64_t base = 0, blocks = 1, period = 0, row_offset = 0, rows = 0, cols = 0;
  int partition_dim = -1;
  MuonGroup group = MuonGroup::none;
  int group_size = 1;
  int64_t local_numel() const { return blocks * rows * cols; }
  // The whole matrix's shape (this rank's piece when nothing is gathered).
  int64_t whole_rows() const { return partition_dim == 0 ? group_size * blocks * rows : blocks * rows; }
  int64_t whole_cols() const { return partition_dim == 1 ? group_size * cols : cols; }
};

// The matrices of a parameter whose local tensor has shape `local`, split by `shard` over
// `shard_size` ranks (of tp, or etp for an expert's weight [E_local, out, in]).
std::vector<MuonMatrix> muon_matrices(const std::string& name, const Shape& local, const ShardSpec& shard,
                                      int shard_size, bool expert, const MuonGeometry& geometry);

// The f32 scratch Muon's step needs for a set of matrices (optim/muon.h lays it out): a
// parameter's momentum input and update (the largest parameter's), a matrix's local piece, its
// gathered pieces and the whole it makes, and the Newton–Schulz workspace.
struct MuonScratch {
  int64_t param = 0, local = 0, gathered = 0, workspace = 0;
  void add(int64_t param_numel, const std::vector<MuonMatrix>& matrices);
  void add(const MuonScratch& other);  // room for both
  int64_t elements() const { return 2 * param + local + 2 * gathered + workspace; }
};

}  // namespace mt
