#include "train/moe_metrics.h"

#include <algorithm>
#include <cstdio>

namespace mt {

MoeIterationMetrics reduce_moe_metrics(const ModelConfig& c, const std::vector<const Stage*>& stages,
                                       int64_t micro_batches, Communicator* tp, Communicator* cp, Communicator* dp,
                                       Communicator* pp) {
  MoeIterationMetrics out;
  if (!c.moe.enabled()) return out;
  const int64_t E = c.moe.num_experts, L = c.num_layers;
  // Per global layer: aux loss, z-loss, E counts; then the choices and the dropped ones. Every
  // layer lives on one pipeline stage, so a sum over the groups assembles them all.
  const int64_t stride = 2 + E;
  std::vector<double> v(static_cast<size_t>(L * stride + 2), 0.0);
  for (const Stage* stage : stages)
    for (int64_t i = stage->range().first_layer; i < stage->range().last_layer; ++i) {
      const MoeLayerStats& s = stage->moe_stats()[static_cast<size_t>(i - stage->range().first_layer)];
      if (s.tokens_per_expert.empty()) continue;
      double* row = &v[static_cast<size_t>(i * stride)];
      row[0] = s.aux_loss;
      row[1] = s.z_loss;
      for (int64_t e = 0; e < E; ++e) row[2 + e] = s.tokens_per_expert[static_cast<size_t>(e)];
      v[v.size() - 2] += s.choices;
      v[v.size() - 1] += s.dropped;
    }
  const TensorView t(v.data(), DType::f64, {static_cast<int64_t>(v.size())});
  for (Communicator* group : {tp, cp, dp, pp})
    if (group != nullptr && group->size() > 1) group->all_reduce(t, ReduceOp::sum);
  const double dp_size = dp != nullptr ? dp->size() : 1;
  const double per_layer = 1.0 / (static_cast<double>(micro_batches) * dp_size);
  double aux = 0.0, z = 0.0, layers = 0.0;
  out.tokens_min = 1e300;
  out.tokens_per_expert.assign(static_cast<size_t>(L * E), 0.0);
  for (int64_t i = 0; i < L; ++i) {
    if (c.mlp_kind(i) != MlpKind::moe) continue;
    const double* row = &v[static_cast<size_t>(i * stride)];
    aux += row[0] * per_layer;
    z += row[1] * per_layer;
    layers += 1.0;
    for (int64_t e = 0; e < E; ++e) {
      out.tokens_per_expert[static_cast<size_t>(i * E + e)] = row[2 + e];
      out.tokens_min = std::min(out.tokens_min, row[2 + e]);
      out.tokens_max = std::max(out.tokens_max, row[2 + e]);
      out.tokens_mean += row[2 + e];
    }
  }
  out.tokens_mean /= layers * static_cast<double>(E);
  if (c.moe.aux_loss()) out.losses.emplace_back(c.moe.aux_loss_name(), aux / layers);
  if (c.moe.z_loss_coeff > 0.0) out.losses.emplace_back("z_loss", z / layers);
  const double choices = v[v.size() - 2];
  out.dropped_fraction = choices > 0.0 ? v[v.size() - 1] / choices : 0.0;
  return out;
}

std::string format_moe_line(const MoeIterationMetrics& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                " MoE: tokens per expert min %.0f mean %.1f max %.0f (max/mean %.2f) | dropped %.2f%% of routed "
                "choices |",
                m.tokens_min, m.tokens_mean, m.tokens_max, m.tokens_mean > 0.0 ? m.tokens_max / m.tokens_mean : 0.0,
                100.0 * m.dropped_fraction);
  return buf;
}

}  // namespace mt
