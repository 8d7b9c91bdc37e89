#include "plan/layout_search.h"

#include <algorithm>

#include "base/error.h"
#include "plan/comm_volume.h"
#include "plan/flops.h"

namespace mt {

DeviceModel device_model(const std::string& name) {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  // Dense bf16 peaks and bandwidths from the vendors' data sheets (SXM parts): NVLink 3 carries
  // 300 GB/s each way, NVLink 4 450; one HDR (200 Gb/s) or NDR (400 Gb/s) NIC per GPU.
  if (name == "a100") return {"a100", 312e12, 0.5, 300e9, 25e9, 8, 80.0 * GiB};
  if (name == "h100") return {"h100", 989e12, 0.5, 450e9, 50e9, 8, 80.0 * GiB};
  if (name == "h200") return {"h200", 989e12, 0.5, 450e9, 50e9, 8, 141e9};
  // A rank per core of the 2-core VMs this project is tested on: ~70 GFLOP/s of sgemm per core
  // (docs/performance.md), MPI over shared memory, 24 GiB shared by the two ranks.
  if (name == "cpu") return {"cpu", 70e9, 0.7, 10e9, 10e9, 2, 12.0 * GiB};
  MT_FAIL() << "--device " << name << ": choose a100, h100, h200 or cpu";
}

std::string LayoutChoice::flags() const {
  std::string f = "--tensor-model-parallel-size " + std::to_string(tp);
  if (sp) f += " --sequence-parallel";
  if (cp > 1) f += " --context-parallel-size " + std::to_string(cp);
  f += " --pipeline-model-parallel-size " + std::to_string(pp);
  if (vp > 1) f += " --num-virtual-stages-per-pipeline-rank " + std::to_string(vp);
  f += " --micro-batch-size " + std::to_string(micro_batch);
  if (recompute == RecomputeGranularity::selective) f += " --recompute-activations";
  if (recompute == RecomputeGranularity::full)
    f += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  if (distributed_optimizer) f += " --use-distributed-optimizer";
  return f;
}

std::vector<LayoutChoice> layout_choices(const ModelConfig& model, int64_t global_batch, int world_size,
                                         int devices_per_node) {
  const int64_t groups = model.num_query_groups > 0 ? model.num_query_groups : model.num_attention_heads;
  std::vector<LayoutChoice> choices;
  for (int tp = 1; tp <= std::min(world_size, devices_per_node); ++tp) {
    if (world_size % tp || model.num_attention_heads % tp || groups % tp) continue;
    for (int pp = 1; pp <= world_size / tp; ++pp) {
      if ((world_size / tp) % pp || model.num_layers % pp) continue;
      for (int cp = 1; cp <= world_size / tp / pp; cp *= 2) {
        if ((world_size / tp / pp) % cp || model.seq_length % (2 * cp)) continue;
        const int dp = world_size / tp / pp / cp;
        if (global_batch % dp) continue;
        for (int vp = 1; vp <= 8; ++vp) {
          if (vp > 1 && (pp == 1 || model.num_layers % (pp * vp))) continue;
          for (int64_t b = 1; b <= 16; b *= 2) {
            if ((global_batch / dp) % b) continue;
            for (const RecomputeGranularity r :
                 {RecomputeGranularity::none, RecomputeGranularity::selective, RecomputeGranularity::full})
              for (const bool distributed : {false, true}) {
                if (distributed && dp * cp == 1) continue;
                choices.push_back({tp, tp > 1, pp, vp, cp, b, r, distributed});
              }
          }
        }
      }
    }
  }
  return choices;
}

namespace {

// The bandwidth a group of `size` ranks, `stride` ranks apart in the world, communicates at.
double bandwidth(const DeviceModel& device, int size, int stride) {
  return size * stride <= device.devices_per_node ? device.link_bytes_per_s : device.network_bytes_per_s;
}

}  // namespace

LayoutEstimate estimate_layout(const TrainingLayout& layout, const PipelinePlan& pipeline, const LayoutChoice& choice,
                               const DeviceModel& device) {
  const ModelConfig& c = layout.model;
  const int tp = layout.grid.tp, pp = pipeline.partition.pp, vp = pipeline.partition.vp, cp = layout.grid.cp;
  const int dp = layout.ddp.data_parallel_size;  // dp × cp: the gradients' group
  const int64_t m = layout.num_microbatches, sequences = layout.micro_batch * m;  // per data-parallel rank
  LayoutEstimate e;
  e.choice = choice;
  for (const PipelineRankMemory& r : plan_memory(layout, pipeline)) e.peak_bytes = std::max(e.peak_bytes, r.total.peak());
  // FLOPs per rank of each pipeline stage: its layers' share of the formula, the output layer on
  // the last, what it recomputes; split over tp.
  const double logits = 6.0 * static_cast<double>(sequences * c.seq_length * c.hidden_size) *
                        static_cast<double>(c.padded_vocab_size());  // the formula's output-layer term
  const double per_layer = (flops_per_iteration(c, sequences) - logits) / static_cast<double>(c.num_layers);
  double busiest = 0.0;
  for (int rank = 0; rank < pp; ++rank) {
    double flops = 0.0;
    for (int chunk = 0; chunk < vp; ++chunk) {
      const ChunkLayers& l = pipeline.partition.chunk(rank, chunk);
      const StageRange range{l.first_layer, l.last_layer, l.embedding, l.head};
      flops += per_layer * static_cast<double>(range.num_layers()) + recompute_flops(c, range, sequences) +
               (range.head ? logits : 0.0);
    }
    busiest = std::max(busiest, flops / (tp * cp));
  }
  e.compute_s = busiest / (device.peak_flops * device.achievable);
  e.bubble_s = e.compute_s * static_cast<double>(pp - 1) / static_cast<double>(vp * m);
  double comm = 0.0;
  for (const StepComm& r : plan_comm(layout, pipeline)) {
    const double tp_s = r.sent_bytes(CommGroup::tp) / bandwidth(device, tp, 1);
    const double pp_s = (r.sent_bytes(CommGroup::pp) + r.sent_bytes(CommGroup::embedding)) /
                        bandwidth(device, pp, tp * dp);
    const int expert_dp = r.size(CommGroup::expert_dp);  // its members lie etp·ep = tp·dp/expert_dp apart
    double dp_s = r.sent_bytes(CommGroup::dp) / bandwidth(device, dp, tp) +
                  r.sent_bytes(CommGroup::expert_dp) / bandwidth(device, expert_dp, tp * dp / expert_dp);
    if (layout.ddp.overlap_grad_reduce) dp_s = std::max(0.0, dp_s - 2.0 / 3.0 * e.compute_s);
    // The ring's blocks travel while the previous block's attention runs: counted whole here, an
    // upper bound until bench/cp_attention measures the overlap.
    const double cp_s = r.sent_bytes(CommGroup::cp) / bandwidth(device, cp, tp);
    comm = std::max(comm, tp_s + pp_s + dp_s + cp_s);
  }
  e.comm_s = comm;
  return e;
}

}  // namespace mt
