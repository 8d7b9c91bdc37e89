#include "model/muon_matrices.h"

#include <algorithm>

#include "base/error.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/muon.h"

namespace mt {

bool is_muon_matrix(const std::string& name, const Shape& whole, bool expert) {
  if (is_vocabulary_param(name)) return false;
  return whole.ndim == 2 || (expert && whole.ndim == 3);
}

QkvRows muon_qkv_rows(const ModelConfig& c) {
  return {c.num_attention_heads / c.num_query_groups * c.kv_channels, c.kv_channels, c.kv_channels};
}

std::vector<MuonMatrix> muon_matrices(const std::string& name, const Shape& local, const ShardSpec& shard,
                                      int shard_size, bool expert, const MuonGeometry& geometry) {
  const int ways = geometry.blockwise || !shard.sharded() ? 1 : shard_size;
  std::vector<MuonMatrix> out;
  if (expert) {  // [E_local, out, in]: one matrix per expert
    const int64_t rows = local[1], cols = local[2];
    const int dim = ways > 1 ? shard.dim - 1 : -1;
    for (int64_t e = 0; e < local[0]; ++e)
      out.push_back({e * rows * cols, 1, rows, 0, rows, cols, dim, MuonGroup::etp, ways});
    return out;
  }
  const int64_t rows = local[0], cols = local[1];
  const int dim = ways > 1 ? shard.dim : -1;
  const MuonGroup group = ways > 1 ? MuonGroup::tp : MuonGroup::none;
  if (!geometry.split_qkv || !name.ends_with("self_attention.linear_qkv.weight"))
    return {{0, 1, rows, 0, rows, cols, dim, group, ways}};
  const QkvRows& s = geometry.qkv;
  const int64_t period = s.q + s.k + s.v;
  MT_CHECK(period > 0 && rows % period == 0)
      << name << ": " << rows << " rows are not whole query groups of " << period << " (Muon's QKV split)";
  const int64_t groups = rows / period;
  return {{0, groups, period, 0, s.q, cols, dim, group, ways},
          {0, groups, period, s.q, s.k, cols, dim, group, ways},
          {0, groups, period, s.q + s.k, s.v, cols, dim, group, ways}};
}

void MuonScratch::add(int64_t param_numel, const std::vector<MuonMatrix>& matrices) {
  param = std::max(param, param_numel);
  for (const MuonMatrix& m : matrices) {
    local = std::max(local, m.local_numel());
    gathered = std::max(gathered, m.group_size * m.local_numel());
    workspace = std::max(workspace, newton_schulz_workspace(m.whole_rows(), m.whole_cols()));
  }
}

void MuonScratch::add(const MuonScratch& other) {
  param = std::max(param, other.param);
  local = std::max(local, other.local);
  gathered = std::max(gathered, other.gathered);
  workspace = std::max(workspace, other.workspace);
}

}  // namespace mt
