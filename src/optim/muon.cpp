#include "optim/muon.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "base/error.h"
#include "ops/elementwise.h"
#include "ops/muon.h"

namespace mt {

namespace {

// emerging_optimizers' coefficient sets (Newton–Schulz polynomials from the Muon, Polar Express,
// CANS, AOL and DeepSeek-V4 work), and whether a schedule longer than the set repeats its last
// iteration (else it cycles through the set).
struct CoefficientSet {
  std::vector<NewtonSchulzStep> steps;
  bool repeat_last = false;
};

const std::map<std::string, CoefficientSet>& coefficient_sets() {
  static const std::map<std::string, CoefficientSet> sets = [] {
    std::map<std::string, CoefficientSet> s;
    s["simple"] = {{{3.4445f, -4.7750f, 2.0315f}}};
    s["quintic"] = {{{4.0848f, -6.8946f, 2.9270f},
                     {3.9505f, -6.3029f, 2.6377f},
                     {3.7418f, -5.5913f, 2.3037f},
                     {2.8769f, -3.1427f, 1.2046f},
                     {2.8366f, -3.0525f, 1.2012f}}};
    s["polar_express"] = {{{8.2051f, -22.9019f, 16.4607f},
                           {4.0664f, -2.8612f, 0.5184f},
                           {3.9096f, -2.8234f, 0.5250f},
                           {3.2856f, -2.4153f, 0.4853f},
                           {2.2779f, -1.6198f, 0.3985f},
                           {1.8726f, -1.2307f, 0.3585f},
                           {1.8564f, -1.2132f, 0.3568f},
                           {1.8750f, -1.2500f, 0.3750f}},
                          true};
    s["cans"] = {{{8.4703f, -25.1081f, 18.6293f},
                  {4.1828f, -3.1087f, 0.5806f},
                  {3.9619f, -2.9541f, 0.5630f},
                  {3.2866f, -2.4647f, 0.5074f},
                  {2.2737f, -1.6447f, 0.4162f}},
                 true};
    s["aol"] = {{{4.0098f, -7.0585f, 2.4635f},
                 {3.4585f, -5.5479f, 2.5959f},
                 {2.7573f, -3.2939f, 1.4254f},
                 {2.7215f, -3.0494f, 1.3169f}}};
    CoefficientSet v4;
    v4.steps.assign(8, {3.4445f, -4.7750f, 2.0315f});
    v4.steps.insert(v4.steps.end(), 2, {2.0f, -1.5f, 0.5f});
    v4.repeat_last = true;
    s["deepseekv4"] = v4;
    s["cubic5"] = {{{3.3656576f, -3.3420992f, 0.0f},
                    {2.5744352f, -1.4957376f, 0.0f},
                    {2.5368962f, -1.4312570f, 0.0f},
                    {2.4418906f, -1.2764040f, 0.0f},
                    {2.2230472f, -0.9630650f, 0.0f}}};
    return s;
  }();
  return sets;
}

// A view of `numel` elements of flat t from `offset`, shaped.
TensorView part(const TensorView& t, int64_t offset, Shape shape) {
  return t.reshape({t.numel()}).rows(offset, shape.numel()).reshape(shape);
}

}  // namespace

std::vector<NewtonSchulzStep> newton_schulz_steps(const std::string& type, int steps) {
  const auto& sets = coefficient_sets();
  const auto it = sets.find(type);
  MT_CHECK(it != sets.end()) << "--muon-coefficient-type " << type << " is not one of " << newton_schulz_types();
  MT_CHECK(steps >= 1) << "--muon-num-ns-steps " << steps << " must be at least 1";
  const CoefficientSet& set = it->second;
  MT_CHECK(type != "cubic5" || steps == static_cast<int>(set.steps.size()))
      << "--muon-coefficient-type cubic5 is a fixed schedule of " << set.steps.size()
      << " iterations; pass --muon-num-ns-steps " << set.steps.size();
  std::vector<NewtonSchulzStep> out;
  for (int i = 0; i < steps; ++i) {
    const size_t n = set.steps.size(), at = static_cast<size_t>(i);
    out.push_back(set.steps[set.repeat_last ? std::min(at, n - 1) : at % n]);
  }
  return out;
}

std::string newton_schulz_types() {
  std::string out;
  for (const char* name : {"simple", "quintic", "polar_express", "cans", "aol", "deepseekv4", "cubic5"})
    out += (out.empty() ? "" : "|") + std::string(name);
  return out;
}

double muon_scale_factor(int64_t out, int64_t in, MuonScaleMode mode) {
  const double o = static_cast<double>(out), i = static_cast<double>(in);
  switch (mode) {
    case MuonScaleMode::spectral:
      return std::sqrt(std::max(o, i));
    case MuonScaleMode::unit_rms_norm:
      return std::sqrt(o / i);
    case MuonScaleMode::shape_scaling:
      return std::sqrt(std::max(1.0, o / i));
  }
  return 1.0;
}

MuonOrthogonalizer::MuonOrthogonalizer(const MuonSetup& setup, const std::vector<const Param*>& params,
                                       Backend& backend, MemoryTracker* tracker)
    : setup_(setup), steps_(newton_schulz_steps(setup.config.coefficient_type, setup.config.num_ns_steps)) {
  MuonScratch size;
  for (const Param* p : params) {
    matrices_[p] = muon_matrices(p->name, p->value.shape, p->shard, p->shard_size, p->expert, setup_.geometry());
    size.add(p->value.numel(), matrices_[p]);
  }
  auto carve = [&](Arena& a) {
    momentum_ = a.alloc(DType::f32, {size.param});
    update_ = a.alloc(DType::f32, {size.param});
    local_ = a.alloc(DType::f32, {size.local});
    gathered_ = a.alloc(DType::f32, {size.gathered});
    whole_ = a.alloc(DType::f32, {size.gathered});
    workspace_ = a.alloc(DType::f32, {size.workspace});
  };
  Arena measure(MemCategory::optimizer);
  carve(measure);
  arena_ = std::make_unique<Arena>(backend, MemCategory::optimizer, measure.used(), tracker);
  carve(*arena_);
}

void MuonOrthogonalizer::orthogonalize(const Param& p, const TensorView& u, const TensorView& update) {
  const MuonConfig& c = setup_.config;
  NewtonSchulzArgs args;
  args.steps = steps_;
  args.bf16 = c.bf16_iteration;
  const auto it = matrices_.find(&p);
  MT_CHECK(it != matrices_.end()) << p.name << " is not one of the matrices this Muon was built for";
  for (const MuonMatrix& m : it->second) {
    const int64_t R = m.blocks * m.rows, C = m.cols, L = m.local_numel();
    const Shape blocks{m.blocks, m.period, C}, mine{m.blocks, m.rows, C};
    const TensorView local = local_.rows(0, L);
    copy_row_block(local.reshape(mine), 0, part(u, m.base, blocks), m.row_offset, m.rows);
    const int t = m.group_size;
    Communicator* group = m.group == MuonGroup::etp ? setup_.etp : setup_.tp;
    MT_CHECK(t == 1 || (group && group->size() == t)) << p.name << ": Muon's matrix is split " << t << " ways";
    const int rank = t > 1 ? group->rank() : 0;
    TensorView whole = local.reshape({R, C});
    if (t > 1) {
      const TensorView gathered = gathered_.rows(0, t * L);
      group->all_gather(gathered, local);
      if (m.partition_dim == 0) {
        whole = gathered.reshape({t * R, C});
      } else {  // [t][R, C] pieces side by side: [R, t·C]
        whole = whole_.rows(0, t * L).reshape({R, t * C});
        for (int j = 0; j < t; ++j)
          copy_row_block(whole.reshape({R, t, C}), j, gathered.rows(j * L, L).reshape({R, 1, C}), 0, 1);
      }
    }
    newton_schulz(whole, args, workspace_);
    scale_inplace(whole, static_cast<float>(muon_scale_factor(whole.dim(0), whole.dim(1), c.scale_mode) *
                                            c.extra_scale_factor));
    if (t > 1) {
      if (m.partition_dim == 0)
        copy_tensor(local, whole.reshape({t * L}).rows(rank * L, L));
      else
        copy_row_block(local.reshape({R, 1, C}), 0, whole.reshape({R, t, C}), rank, 1);
    }
    copy_row_block(part(update, m.base, blocks), m.row_offset, local.reshape(mine), 0, m.rows);
  }
}

}  // namespace mt
