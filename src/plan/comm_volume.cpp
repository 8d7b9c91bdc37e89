// The communication of one train_step, term by term. Every term names the code that makes the
// calls, so a change there shows up here (and in tests/parallel/test_plan_layouts.cpp, which
// compares the two exactly).
//
// Notation: t tensor-parallel ranks, m micro-batches per iteration, micro-batch b, sequence s
// (this context-parallel rank's tokens of a sequence), hidden h; N = s·b rows; under sequence parallelism (sp, which needs t > 1) each rank holds
// Nl = N/t of them, else Nl = N. H = one f32 [N, h] tensor: every tensor-parallel collective of
// the layers moves the whole sequence's hidden states in f32 (the scratch buffers the layers
// reduce into are f32 whatever --bf16 says; only the stored activations are 16-bit).
#include "plan/comm_volume.h"

#include <algorithm>
#include <tuple>

#include "model/blocks/moe.h"
#include "model/muon_matrices.h"
#include "model/params.h"
#include "model/recompute.h"
#include "model/stage_buffers.h"
#include "parallel/grid.h"
#include "parallel/shard.h"

namespace mt {

namespace {

using Collective = CommTotals::Kind CommTotals::*;
constexpr Collective all_reduce = &CommTotals::all_reduce, all_gather = &CommTotals::all_gather,
                     reduce_scatter = &CommTotals::reduce_scatter, send = &CommTotals::send,
                     recv = &CommTotals::recv;

void add_kind(CommTotals::Kind& to, const CommTotals::Kind& from) {
  to.calls += from.calls;
  to.bytes += from.bytes;
}

void add_totals(CommTotals& to, const CommTotals& from) {
  for (Collective k : {all_reduce, all_gather, reduce_scatter, &CommTotals::broadcast, &CommTotals::all_to_all_v, send, recv})
    add_kind(to.*k, from.*k);
}

// A rank's terms; repeats of one (group, what) add up into one term.
class Terms {
 public:
  // ranks: the communicator's when it is not the group's own (0).
  void add(CommGroup group, const std::string& what, Collective kind, int64_t calls, int64_t bytes_each,
           int ranks = 0) {
    if (calls == 0) return;
    auto it = std::find_if(terms_.begin(), terms_.end(),
                           [&](const CommTerm& t) { return t.group == group && t.what == what; });
    if (it == terms_.end()) it = terms_.insert(terms_.end(), CommTerm{group, what, {}, ranks});
    (it->totals.*kind).calls += static_cast<size_t>(calls);
    (it->totals.*kind).bytes += static_cast<size_t>(calls * bytes_each);
  }
  std::vector<CommTerm> take() { return std::move(terms_); }

 private:
  std::vector<CommTerm> terms_;
};

// The tensor-parallel collectives of one model chunk's micro-batches (parallel/layers.cpp,
// parallel/mappings.cpp), each `calls` times per micro-batch.
class TensorParallelTerms {
 public:
  TensorParallelTerms(Terms& terms, const ModelConfig& c, int64_t micro_batch, int microbatches)
      : terms_(terms),
        c_(c),
        micro_batch_(micro_batch),
        sp_(c.sequence_parallel),
        m_(microbatches),
        rows_(c.local_seq_length() * micro_batch),
        hidden_(rows_ * c.hidden_size * 4) {}

  // Column-parallel linear forward: under sp, the all-gather of its input's rows (H); without,
  // nothing (its input is already whole on every rank).
  void column_forward(const std::string& what, int64_t calls) {
    if (sp_) add(what, all_gather, calls, hidden_);
  }
  // Row-parallel linear forward: its partial sums, all-reduced (H) or under sp reduce-scattered
  // into this rank's rows (H in).
  void row_forward(const std::string& what, int64_t calls) {
    add(what, sp_ ? reduce_scatter : all_reduce, calls, hidden_);
  }
  // Row-parallel backward: under sp, the all-gather of the output gradient's rows (H).
  void row_backward(const std::string& what, int64_t calls) {
    if (sp_) add(what, all_gather, calls, hidden_);
  }
  // Column-parallel backward: the input gradient's partial sums all-reduced (H); under sp the
  // input is all-gathered again (it was not kept) and the gradient reduce-scattered.
  void column_backward(const std::string& what, int64_t calls) {
    if (sp_) {
      add(what, all_gather, calls, hidden_);
      add(what, reduce_scatter, calls, hidden_);
    } else {
      add(what, all_reduce, calls, hidden_);
    }
  }

  // A transformer layer's forward: qkv (column) and proj (row), then its MLP block: a dense one's
  // fc1 (column) and fc2 (row; a rerun that keeps the output stops short of it), an MoE one's
  // shared expert (the same two), with a load-balancing loss its counts f32 [B, E] all-reduced, and
  // under Sinkhorn with sp the router logits f32 [N, E] all-gathered (model/blocks/moe.cpp).
  // Routed experts need no tensor-parallel collective (their weights are whole).
  void layer_forward(const std::string& what, int64_t layer, bool to_fc1 = false) {
    column_forward(what, 1);
    row_forward(what, 1);
    if (c_.mlp_kind(layer) == MlpKind::dense) {
      column_forward(what, 1);
      if (!to_fc1) row_forward(what, 1);
      return;
    }
    moe_forward(what);
  }
  // An MoE block's forward (also rerun whole under --recompute-modules moe).
  void moe_forward(const std::string& what) {
    if (c_.moe.shared_expert_intermediate_size > 0) {
      column_forward(what, 1);
      row_forward(what, 1);
    }
    if (c_.moe.aux_loss()) add(what, all_reduce, 1, 4 * moe_aux_count_rows(c_, micro_batch_) * c_.moe.num_experts);
    if (c_.moe.load_balancing == MoeLoadBalancing::sinkhorn && sp_)
      add(what, all_gather, 1, 4 * rows_ * c_.moe.num_experts);
  }
  // Its backward mirrors it, block by block: fc2 (row), fc1 (column), proj (row), qkv (column).
  void layer_backward(const std::string& what, int64_t layer) {
    if (has_mlp_linears(layer)) {
      row_backward(what, 1);
      column_backward(what, 1);
    }
    row_backward(what, 1);
    column_backward(what, 1);
  }
  // Whether the layer's MLP block has tensor-parallel linears: a dense MLP or a shared expert.
  bool has_mlp_linears(int64_t layer) const {
    return c_.mlp_kind(layer) == MlpKind::dense || c_.moe.shared_expert_intermediate_size > 0;
  }

  // The vocabulary-parallel embedding (model/blocks/embedding.cpp) works like a row-parallel
  // layer: each rank looks up its vocabulary rows, the partial sums are all-reduced (H) or under
  // sp reduce-scattered; its backward under sp all-gathers the gradient's rows (H).
  void embedding() {
    row_forward("embedding forward", 1);
    row_backward("embedding backward", 1);
  }

  // The output layer and loss (model/blocks/output_head.cpp), whose backward runs inside the
  // forward: under sp the final norm's output all-gathered (H) and its input gradient
  // reduce-scattered (H); without, that gradient all-reduced (H). The vocabulary-parallel cross
  // entropy all-reduces 3 f32 vectors (row max, target logit, Σ exp) per chunk of `chunk` rows:
  // 3·⌈N/chunk⌉ calls of 4·N·3 bytes in all.
  void output_head(int64_t chunk) {
    if (sp_) {
      add("output head", all_gather, 1, hidden_);
      add("output head", reduce_scatter, 1, hidden_);
    } else {
      add("output head", all_reduce, 1, hidden_);
    }
    for (int64_t r0 = 0; r0 < rows_; r0 += chunk) add("cross entropy", all_reduce, 3, 4 * std::min(chunk, rows_ - r0));
  }

 private:
  void add(const std::string& what, Collective kind, int64_t calls, int64_t bytes) {
    terms_.add(CommGroup::tp, what, kind, calls * m_, bytes);
  }

  Terms& terms_;
  const ModelConfig& c_;
  int64_t micro_batch_;
  bool sp_;
  int64_t m_, rows_, hidden_;
};

// One model chunk's tensor-parallel traffic over all micro-batches (model/stage.cpp: forward,
// backward with its recomputation).
void tensor_parallel_chunk(Terms& terms, const TrainingLayout& layout, const StageRange& range) {
  const ModelConfig& c = layout.model;
  TensorParallelTerms tp(terms, c, layout.micro_batch, layout.num_microbatches);
  if (range.embedding) tp.embedding();
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) tp.layer_forward("layer forward", i);
  if (range.head) tp.output_head(std::min(StageGeometry{}.head_chunk_tokens, c.local_seq_length() * layout.micro_batch));
  // Full recomputation: before the backward of a group's last layer the group's forward reruns
  // from its saved input, every layer whole but the last, which stops short of fc2.
  const RecomputePlan recompute(c, range);
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    if (!recompute.group_last(i)) continue;
    for (int64_t j = recompute.group_first(i); j <= i; ++j) tp.layer_forward("full recompute", j, /*to_fc1=*/j == i);
  }
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    // Selective recomputation: --recompute-modules moe reruns an MoE block's forward before its
    // backward; mlp (dense layers) and shared_experts rerun fc1 in the backward (its all-gather under sp).
    const bool moe = c.mlp_kind(i) == MlpKind::moe, shared = moe && c.moe.shared_expert_intermediate_size > 0;
    if (moe && c.recompute_moe) tp.moe_forward("selective recompute (moe)");
    if ((!moe && c.recompute_mlp) || (shared && c.recompute_shared_experts))
      tp.column_forward("selective recompute (fc1)", 1);
    tp.layer_backward("layer backward", i);
  }
}

// Context parallelism's attention (parallel/context_parallel.cpp), per layer forward and backward
// of each micro-batch, all f32 over the cp group of c ranks: with this rank's q of b·n·sl·d floats
// and k, v of b·g·sl·d each (n, g after tp), one K/V block is B = 4·b·g·sl·d bytes.
//   p2p: the forward passes c − 1 blocks of K and of V on (sends and receives); the backward the
//     same, plus c dK and c dV accumulators.
//   a2a: the forward exchanges q, k, v and the output (each all_to_all_v counting the (c − 1)/c
//     of it that leaves); the backward q, k, v, the output and its gradient, then dq, dk, dv.
//   allgather: K and V gathered (c·B each) in the forward and again in the backward, whose dK and
//     dV are reduce-scattered (c·B in each).
class ContextParallelTerms {
 public:
  ContextParallelTerms(Terms& terms, const ModelConfig& c, int64_t micro_batch, int microbatches)
      : terms_(terms), c_(c), micro_batch_(micro_batch), type_(c.cp_comm_type), cp_(c.context_parallel_size),
        m_(microbatches) {
    const int64_t t = c.tensor_model_parallel_size, sl = c.local_seq_length(), d = c.kv_channels;
    q_ = 4 * micro_batch * (c.num_attention_heads / t) * sl * d;
    kv_ = 4 * micro_batch * (c.num_query_groups / t) * sl * d;
  }
  // An MoE layer's forward also sums its load-balancing counts f32 [B, E] over cp (model/blocks/moe.cpp).
  void forward(const std::string& what, int64_t layer) {
    if (c_.mlp_kind(layer) == MlpKind::moe) moe_forward(what);
    switch (type_) {
      case CpCommType::p2p: ring(what, 2 * (cp_ - 1)); break;
      case CpCommType::a2a: exchange(what, {q_, kv_, kv_, q_}); break;
      case CpCommType::allgather: add(what, all_gather, 2, cp_ * kv_); break;
    }
  }
  // Its load-balancing counts f32 [B, E] summed, or Sinkhorn's logits f32 [c·N, E] gathered.
  void moe_forward(const std::string& what) {
    const int64_t E = c_.moe.num_experts;
    if (c_.moe.aux_loss()) add(what, all_reduce, 1, 4 * moe_aux_count_rows(c_, micro_batch_) * E);
    if (c_.moe.load_balancing == MoeLoadBalancing::sinkhorn)
      add(what, all_gather, 1, 4 * cp_ * c_.local_seq_length() * micro_batch_ * E);
  }
  void backward(const std::string& what) {
    switch (type_) {
      case CpCommType::p2p: ring(what, 2 * (cp_ - 1) + 2 * cp_); break;
      case CpCommType::a2a: exchange(what, {q_, kv_, kv_, q_, q_, q_, kv_, kv_}); break;
      case CpCommType::allgather:
        add(what, all_gather, 2, cp_ * kv_);
        add(what, reduce_scatter, 2, cp_ * kv_);
        break;
    }
  }

 private:
  void ring(const std::string& what, int64_t blocks) {
    add(what, send, blocks, kv_);
    add(what, recv, blocks, kv_);
  }
  void exchange(const std::string& what, std::initializer_list<int64_t> tensors) {
    for (int64_t bytes : tensors) add(what, &CommTotals::all_to_all_v, 1, bytes / cp_ * (cp_ - 1));
  }
  void add(const std::string& what, Collective kind, int64_t calls, int64_t bytes) {
    terms_.add(CommGroup::cp, what, kind, calls * m_, bytes);
  }

  Terms& terms_;
  const ModelConfig& c_;
  int64_t micro_batch_;
  CpCommType type_;
  int64_t cp_, m_, q_ = 0, kv_ = 0;
};

// One model chunk's context-parallel traffic over all micro-batches: every layer's attention
// forward and backward, and the forwards that full recomputation reruns.
void context_parallel_chunk(Terms& terms, const TrainingLayout& layout, const StageRange& range) {
  const ModelConfig& c = layout.model;
  ContextParallelTerms cp(terms, c, layout.micro_batch, layout.num_microbatches);
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) cp.forward("layer forward", i);
  const RecomputePlan recompute(c, range);
  for (int64_t i = range.first_layer; i < range.last_layer; ++i)
    if (recompute.group_last(i))
      for (int64_t j = recompute.group_first(i); j <= i; ++j) cp.forward("full recompute", j);
  for (int64_t i = range.first_layer; i < range.last_layer; ++i) {
    if (c.mlp_kind(i) == MlpKind::moe && c.recompute_moe) cp.moe_forward("selective recompute (moe)");
    cp.backward("layer backward");
  }
}

// One chunk's gradient synchronisation (optim/grad_sync.cpp), once per iteration.
void gradient_sync_chunk(Terms& terms, const TrainingLayout& layout, const StageRange& range, bool embedding_group) {
  const ModelConfig& c = layout.model;
  const DdpConfig& ddp = layout.ddp;
  const int t = static_cast<int>(c.tensor_model_parallel_size);
  const std::vector<ParamSpec> all = param_specs(c, range);
  const std::vector<ParamSpec> specs = param_subset(all, ParamSet::dense), experts = param_subset(all, ParamSet::experts);
  // Parameters every tp rank holds whole but computes on its part of the rows (under sp the norms
  // and an MoE layer's router on s/t tokens; the query and key norms on its own heads) have partial
  // gradients: each is all-reduced over tp (f32), one call per parameter.
  if (t > 1)
    for (const ParamSpec& s : specs)
      if (s.partial_over_tp) terms.add(CommGroup::tp, "partial norm and router gradients", all_reduce, 1,
                                       4 * shard_sizes(c).of(s).local(s.shape).numel());
  // Every bucket of the f32 gradient buffer (padding included) over dp: all-reduced, or under the
  // distributed optimizer reduce-scattered (the whole bucket in) over the optimizer instance and,
  // with several instances, the rank's reduced shard all-reduced across them. The same calls with
  // or without --overlap-grad-reduce; only their timing differs.
  // An MoE model's expert weights likewise over expert-dp, in their own buffer.
  for (const auto& [group, subset, settings] :
       {std::tuple{CommGroup::dp, &specs, ddp}, std::tuple{CommGroup::expert_dp, &experts, expert_ddp(c, ddp)}}) {
    if (subset->empty() || settings.data_parallel_size <= 1) continue;
    const bool distributed = settings.use_distributed_optimizer;
    const int shard = settings.shard_size(), instances = settings.num_distributed_optimizer_instances;
    for (const DdpBucket& b : param_buffer_layout(*subset, settings, shard_sizes(c)).buckets)
      terms.add(group, "gradient buckets", distributed ? reduce_scatter : all_reduce, 1, 4 * b.range.numel(), shard);
    if (distributed && instances > 1)
      for (const DdpBucket& b : param_buffer_layout(*subset, settings, shard_sizes(c)).buckets)
        terms.add(group, "gradient shards across optimizer instances", all_reduce, 1, 4 * b.range.numel() / shard,
                  instances);
  }
  // The tied word embedding's two copies (first and last pipeline stage): their f32 gradients
  // summed over the embedding group after the dp reduction.
  if (embedding_group)
    for (const ParamSpec& s : specs)
      if (s.shared_embedding)
        terms.add(CommGroup::embedding, "tied embedding gradients", all_reduce, 1,
                  4 * shard_sizes(c).of(s).local(s.shape).numel());
}

// After the optimizer step the distributed optimizer all-gathers every bucket of one chunk's
// updated values (the parameter dtype, the whole bucket out), with or without
// --overlap-param-gather. A step skipped for an fp16 overflow gathers nothing: the one
// data-dependent term.
void parameter_gather_chunk(Terms& terms, const TrainingLayout& layout, const StageRange& range) {
  const ModelConfig& c = layout.model;
  const std::vector<ParamSpec> all = param_specs(c, range);
  for (const auto& [group, set, settings] : {std::tuple{CommGroup::dp, ParamSet::dense, layout.ddp},
                                              std::tuple{CommGroup::expert_dp, ParamSet::experts, expert_ddp(c, layout.ddp)}}) {
    const std::vector<ParamSpec> subset = param_subset(all, set);
    if (subset.empty() || !settings.use_distributed_optimizer || settings.data_parallel_size <= 1) continue;
    for (const DdpBucket& b : param_buffer_layout(subset, settings, shard_sizes(c)).buckets)
      terms.add(group, "parameter gather", all_gather, 1, b.range.numel() * static_cast<int64_t>(dtype_size(c.params_dtype)),
                settings.shard_size());
  }
}

// --optimizer muon (optim/optimizer.cpp): before the iteration each dense matrix split over tp is
// gathered whole (f32) over tp, and under the distributed optimizer every bucket holding a Muon
// matrix gathers its momenta (f32, the whole bucket out) over the optimizer instance.
void muon_gathers_chunk(Terms& terms, const TrainingLayout& layout, const StageRange& range) {
  if (!layout.muon) return;
  const ModelConfig& c = layout.model;
  const std::vector<ParamSpec> all = param_specs(c, range);
  const ShardRanks ranks = shard_sizes(c);
  for (const ParamSpec& p : param_subset(all, ParamSet::dense)) {
    if (!is_muon_matrix(p.name, p.shape, p.expert)) continue;
    const ShardRanks::Split split = ranks.of(p);
    for (const MuonMatrix& m : muon_matrices(p.name, split.local(p.shape), split.shard, split.size, p.expert, *layout.muon))
      if (m.group_size > 1) terms.add(CommGroup::tp, "Muon's whole matrices", all_gather, 1, 4 * m.group_size * m.local_numel());
  }
  for (const auto& [group, set, settings] : {std::tuple{CommGroup::dp, ParamSet::dense, layout.ddp},
                                              std::tuple{CommGroup::expert_dp, ParamSet::experts, expert_ddp(c, layout.ddp)}}) {
    const std::vector<ParamSpec> subset = param_subset(all, set);
    if (subset.empty() || !settings.use_distributed_optimizer || settings.shard_size() <= 1) continue;
    for (const DdpBucket& b : param_buffer_layout(subset, settings, ranks).buckets)
      if (std::any_of(b.params.begin(), b.params.end(), [&](int i) {
            const ParamSpec& p = subset[static_cast<size_t>(i)];
            return is_muon_matrix(p.name, p.shape, p.expert);
          }))
        terms.add(group, "Muon's momenta", all_gather, 1, 4 * b.range.numel(), settings.shard_size());
  }
}

// The pipeline's messages (pipeline/executor.cpp): every send and receive of the rank's action
// list, one micro-batch's hidden states [Nl, h] each: activations in the parameter dtype,
// gradients in f32.
void pipeline_messages(Terms& terms, const TrainingLayout& layout, const std::vector<Action>& actions) {
  const ModelConfig& c = layout.model;
  const int64_t t = c.tensor_model_parallel_size;
  const int64_t rows = c.local_seq_length() * layout.micro_batch / (c.sequence_parallel && t > 1 ? t : 1);
  const int64_t numel = rows * c.hidden_size;
  auto bytes = [&](Direction d) {
    return numel * static_cast<int64_t>(d == Direction::activation ? dtype_size(c.params_dtype) : 4);
  };
  auto what = [](Direction d) { return d == Direction::activation ? "pipeline activations" : "pipeline gradients"; };
  for (const Action& a : actions) {
    for (const Transfer& x : a.sends) terms.add(CommGroup::pp, what(x.direction), send, 1, bytes(x.direction));
    for (const Transfer& x : a.recvs) terms.add(CommGroup::pp, what(x.direction), recv, 1, bytes(x.direction));
  }
}

}  // namespace

const char* comm_group_name(CommGroup group) {
  switch (group) {
    case CommGroup::tp: return "tp";
    case CommGroup::pp: return "pp";
    case CommGroup::embedding: return "embedding";
    case CommGroup::dp: return "dp";
    case CommGroup::expert_dp: return "expert-dp";
    case CommGroup::cp: return "cp";
  }
  return "?";
}

CommTotals StepComm::totals(CommGroup group) const {
  CommTotals sum;
  for (const CommTerm& t : terms)
    if (t.group == group) add_totals(sum, t.totals);
  return sum;
}

double StepComm::sent_bytes(CommGroup group) const {
  // Summed per communicator size, as the Trainer sums its counters.
  std::vector<int> sizes;
  for (const CommTerm& t : terms)
    if (t.group == group && std::find(sizes.begin(), sizes.end(), t.ranks) == sizes.end()) sizes.push_back(t.ranks);
  double sent = 0.0;
  for (int ranks : sizes) {
    CommTotals sum;
    for (const CommTerm& t : terms)
      if (t.group == group && t.ranks == ranks) add_totals(sum, t.totals);
    sent += sum.sent_bytes(ranks);
  }
  return sent;
}

std::vector<StepComm> plan_comm(const TrainingLayout& layout) { return plan_comm(layout, pipeline_plan(layout)); }

std::vector<StepComm> plan_comm(const TrainingLayout& layout, const PipelinePlan& pipeline) {
  const ModelConfig& c = layout.model;
  const PipelinePartition& partition = pipeline.partition;
  const int t = static_cast<int>(c.tensor_model_parallel_size);
  const int pp = partition.pp, dp = ParallelGrid(layout.grid).dp(), cp = static_cast<int>(c.context_parallel_size);
  const int dp_cp = dp * cp;  // the gradients' and loss sums' group (dp itself without cp)
  std::vector<StepComm> ranks;
  for (int r = 0; r < pp; ++r) {
    StepComm step;
    step.pp_rank = r;
    const bool embedding_group = pp > 1 && (r == 0 || r == pp - 1);  // else a group of one: no traffic
    const int expert_dp = c.moe.enabled() ? expert_ddp(c, layout.ddp).data_parallel_size : 1;
    step.group_sizes = {t, pp, embedding_group ? 2 : 1, dp_cp, expert_dp, cp};
    Terms terms;
    // forward_backward (train/trainer.cpp): --calculate-per-token-loss first sums the token
    // count over dp (one f64).
    if (layout.per_token_loss && dp > 1) terms.add(CommGroup::dp, "token count", all_reduce, 1, 8, dp);
    std::vector<StageRange> ranges;
    for (int chunk = 0; chunk < partition.vp; ++chunk) {
      const ChunkLayers& l = partition.chunk(r, chunk);
      ranges.push_back({l.first_layer, l.last_layer, l.embedding, l.head});
    }
    if (t > 1)
      for (const StageRange& range : ranges) tensor_parallel_chunk(terms, layout, range);
    if (cp > 1)
      for (const StageRange& range : ranges) context_parallel_chunk(terms, layout, range);
    // global_aux_loss: each MoE layer's counts f32 [E] summed over dp, per micro-batch.
    if (c.moe.enabled() && c.moe.aux_loss() && c.moe.load_balancing == MoeLoadBalancing::global_aux_loss && dp > 1)
      for (const StageRange& range : ranges)
        for (int64_t i = range.first_layer; i < range.last_layer; ++i)
          if (c.mlp_kind(i) == MlpKind::moe)
            terms.add(CommGroup::dp, "global load-balancing counts", all_reduce, layout.num_microbatches,
                      4 * c.moe.num_experts, dp);
    pipeline_messages(terms, layout, pipeline.largest_train().ranks.at(static_cast<size_t>(r)));
    for (const StageRange& range : ranges) gradient_sync_chunk(terms, layout, range, embedding_group);
    // The loss sums (Σ loss, Σ mask: two f64) over dp × cp, then over the pipeline.
    if (dp_cp > 1) terms.add(CommGroup::dp, "loss sums", all_reduce, 1, 16);
    if (pp > 1) terms.add(CommGroup::pp, "loss sums", all_reduce, 1, 16);
    // MoE: the iteration's losses and tokens per expert (train/moe_metrics.cpp), f64 per layer
    // (2 + E) and 2 more, summed over tp, dp and pp.
    if (c.moe.enabled()) {
      const int64_t bytes = 8 * (c.num_layers * (2 + c.moe.num_experts) + 2);
      for (const auto& [group, size, ranks] : {std::tuple{CommGroup::tp, t, t}, std::tuple{CommGroup::cp, cp, cp},
                                               std::tuple{CommGroup::dp, dp, dp}, std::tuple{CommGroup::pp, pp, pp}})
        if (size > 1) terms.add(group, "moe metrics", all_reduce, 1, bytes, ranks);
    }
    // The optimizer's gradient norm: under the distributed optimizer each rank's sum of squares
    // (one f64) over its instance's ranks (dp, or dp/N with N instances) first. Its sum over the
    // model-parallel group (found_inf follows from the norm) runs over a group the Trainer does
    // not count.
    // --log-params-norm reduces the parameters' norm the same way after the update.
    const int shard = layout.ddp.shard_size();
    const int norms = layout.params_norm ? 2 : 1;
    if (layout.ddp.use_distributed_optimizer && shard > 1)
      terms.add(CommGroup::dp, "gradient (and params) norm", all_reduce, norms, 8, shard);
    const bool expert_chunks = std::any_of(ranges.begin(), ranges.end(), [&](const StageRange& r) {
      return c.mlp_kinds(r.first_layer, r.last_layer).moe;
    });
    const int expert_shard = c.moe.enabled() ? expert_ddp(c, layout.ddp).shard_size() : 1;
    if (layout.ddp.use_distributed_optimizer && expert_shard > 1 && expert_chunks)
      terms.add(CommGroup::expert_dp, "gradient (and params) norm", all_reduce, norms, 8, expert_shard);
    for (const StageRange& range : ranges) {
      muon_gathers_chunk(terms, layout, range);
      parameter_gather_chunk(terms, layout, range);
    }
    step.terms = terms.take();
    for (CommTerm& term : step.terms)
      if (term.ranks == 0) term.ranks = step.size(term.group);
    ranks.push_back(std::move(step));
  }
  return ranks;
}

}  // namespace mt
