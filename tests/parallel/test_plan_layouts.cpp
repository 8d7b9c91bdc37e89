// plan/ against real runs, over tp (with and without sp), pp (1F1B and interleaved), dp
// (all-reduced or reduce-scattered buckets, overlapped or not), recomputation (full uniform and
// block, selective), fp32 and bf16, tied and untied embeddings: every rank's memory tracker peaks,
// category by category, must be plan_memory's for its pipeline stage to the byte, and its calls
// and bytes of each kind over each counted group in a training step plan_comm's exactly. Also the
// distributed optimizer's shard of the model state against the formulas.
#include <sstream>

#include "model/stage.h"
#include "optim/optimizer.h"
#include "plan/comm_volume.h"
#include "plan/memory_plan.h"
#include "plan/model_state.h"
#include "train_testing.h"

namespace mt::test {
namespace {

struct Layout {
  const char* name;
  int tp = 1, pp = 1, vp = 1;
  bool sp = false;
  bool llama = false;  // untied output layer, RMSNorm, no biases, RoPE; else GPT-2 (tied)
  bool bf16 = false;
  bool distributed = false;
  int instances = 1;     // --num-distributed-optimizer-instances
  bool overlap = false;  // --overlap-grad-reduce (and param gather) with buckets small enough to be several
  bool per_token_loss = false;
  RecomputeGranularity recompute = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
  int64_t recompute_layers = 1;
  bool recompute_mlp = false;
  bool recompute_shared_experts = false, recompute_moe = false;  // --recompute-modules shared_experts, moe
  bool unfused = false;  // --attention-backend unfused: the [b, n, s, s] probabilities kept
  int64_t num_layers = 2, seq_length = 32, micro_batch = 2;
  const char* moe_layers = nullptr;  // --moe-layer-freq of an MoE model (4 experts, top-2), or dense
  int ep = 1;                        // its --expert-model-parallel-size (alltoall dispatcher)
  bool sinkhorn = false;             // its routing: Sinkhorn, top-1 (logits gathered under sp)
  int cp = 1;                        // --context-parallel-size
  CpCommType cp_type = CpCommType::p2p;
  bool muon = false;  // --optimizer muon
};

std::string describe(const StepComm& plan, CommGroup group) {
  std::ostringstream out;
  out << "plan's " << comm_group_name(group) << " terms on pipeline rank " << plan.pp_rank << ":\n";
  for (const CommTerm& t : plan.terms) {
    if (t.group != group) continue;
    out << "  " << t.what << ":";
    const std::pair<const char*, CommTotals::Kind> kinds[] = {
        {"all_reduce", t.totals.all_reduce}, {"all_gather", t.totals.all_gather},
        {"reduce_scatter", t.totals.reduce_scatter}, {"broadcast", t.totals.broadcast},
        {"send", t.totals.send}, {"recv", t.totals.recv}, {"all_to_all_v", t.totals.all_to_all_v}};
    for (const auto& [name, k] : kinds)
      if (k.calls) out << " " << name << " " << k.calls << " calls " << k.bytes << " B";
    out << "\n";
  }
  return out.str();
}

void expect_same(const CommTotals& got, const StepComm& plan, CommGroup group) {
  const CommTotals want = plan.totals(group);
  const std::pair<const char*, CommTotals::Kind CommTotals::*> kinds[] = {
      {"all_reduce", &CommTotals::all_reduce}, {"all_gather", &CommTotals::all_gather},
      {"reduce_scatter", &CommTotals::reduce_scatter}, {"broadcast", &CommTotals::broadcast},
      {"send", &CommTotals::send}, {"recv", &CommTotals::recv}, {"all_to_all_v", &CommTotals::all_to_all_v}};
  for (const auto& [name, kind] : kinds) {
    EXPECT_EQ((got.*kind).calls, (want.*kind).calls) << comm_group_name(group) << " " << name << " calls\n"
                                                      << describe(plan, group);
    EXPECT_EQ((got.*kind).bytes, (want.*kind).bytes) << comm_group_name(group) << " " << name << " bytes\n"
                                                     << describe(plan, group);
  }
}

// The tracker's peaks of a trained run against the plan (both count the tensors' own bytes, not
// the arenas' alignment padding).
void expect_same_memory(const MemoryTracker& got, const RankMemory& want) {
  const std::pair<MemCategory, int64_t> planned[] = {
      {MemCategory::weights, want.weights},         {MemCategory::grads, want.grads},
      {MemCategory::optimizer, want.optimizer},     {MemCategory::activations, want.activations},
      {MemCategory::workspace, want.workspace},     {MemCategory::comm, want.comm}};
  for (const auto& [category, bytes] : planned)
    EXPECT_EQ(static_cast<int64_t>(got.peak(category)), bytes) << mem_category_name(category);
  EXPECT_EQ(static_cast<int64_t>(got.peak_total()), want.peak());
}

TEST(PlanLayouts, TheDistributedOptimizersShardIsTheFormulas) {
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const bool overlap : {false, true}) {
      ModelConfig c;
      c.num_layers = 2;
      c.hidden_size = 40;
      c.num_attention_heads = 4;
      c.seq_length = 8;
      c.vocab_size = 70;
      c.params_dtype = dtype;
      c.finalize();
      MemoryTracker memory;
      StageOptions options;
      options.slots = 1;
      options.ddp.data_parallel_size = world().size();
      options.ddp.use_distributed_optimizer = true;
      options.ddp.overlap_grad_reduce = overlap;
      options.ddp.bucket_size = overlap ? 4000 : 0;  // several buckets, each padded
      const StageRange range{0, 2, true, true};
      Stage stage(c, range, 1, cpu_backend(), &memory, options);
      Optimizer adam({{&stage.params().params(), {&stage.params().layout(), &world()}}}, cpu_backend(), &memory);
      const ModelStateBytes expected = model_state_bytes(c, range, options.ddp);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::weights)), expected.weights);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::grads)), expected.grads);
      EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::optimizer)), expected.optimizer);
      // Muon under the distributed optimizer: every rank keeps v for the most Adam elements any
      // shard has, plus a bucket for the gathered momenta.
      MemoryTracker muon_memory;
      const MuonSetup setup{MuonConfig{}, nullptr, nullptr, muon_qkv_rows(c)};
      const MuonGeometry geometry = setup.geometry();
      Optimizer muon({{&stage.params().params(), {&stage.params().layout(), &world()}}}, cpu_backend(), &muon_memory,
                     nullptr, &setup);
      const ModelStateBytes with_muon = model_state_bytes(c, range, options.ddp, &geometry);
      EXPECT_LT(with_muon.optimizer, expected.optimizer);
      EXPECT_EQ(static_cast<int64_t>(muon_memory.peak(MemCategory::optimizer)),
                with_muon.optimizer + muon_scratch_bytes({with_muon}));
    }
}

// Each layout trains two steps on the whole job. Every rank's memory must be plan_memory's for
// its pipeline rank, and each step's traffic over tp, pp, the embedding group and dp
// plan_comm's, call for call and byte for byte (and so must the bytes the step reports sending).
TEST(PlanLayouts, EveryRanksMemoryAndStepTrafficAreThePlans) {
  const Layout layouts[] = {
      {.name = "tp 2, fp32, two cross-entropy chunks", .tp = 2, .seq_length = 160, .micro_batch = 4},
      {.name = "tp 2 + sp, bf16, selective recompute of the MLP, untied",
       .tp = 2,
       .sp = true,
       .llama = true,
       .bf16 = true,
       .recompute = RecomputeGranularity::selective,
       .recompute_mlp = true},
      {.name = "pp 2 (1F1B), unfused attention, fp32, tied", .pp = 2, .unfused = true},
      {.name = "pp 2 interleaved (vp 2), bf16, distributed optimizer, tied",
       .pp = 2,
       .vp = 2,
       .bf16 = true,
       .distributed = true,
       .num_layers = 4},
      {.name = "dp, distributed optimizer, overlapped reduce and gather in buckets, bf16, untied",
       .llama = true,
       .bf16 = true,
       .distributed = true,
       .overlap = true},
      {.name = "dp, two distributed-optimizer instances, overlapped reduce and gather in buckets, bf16",
       .bf16 = true,
       .distributed = true,
       .instances = 2,
       .overlap = true},
      {.name = "dp, all-reduced buckets overlapped, per-token loss, fp32", .overlap = true, .per_token_loss = true},
      {.name = "tp 2, full block recompute, distributed optimizer, fp32",
       .tp = 2,
       .distributed = true,
       .recompute = RecomputeGranularity::full,
       .method = RecomputeMethod::block},
      {.name = "tp 2 + sp + pp 2, full uniform recompute (groups of 2 over 3 layers), unfused attention, bf16, tied",
       .tp = 2,
       .pp = 2,
       .sp = true,
       .bf16 = true,
       .recompute = RecomputeGranularity::full,
       .recompute_layers = 2,
       .unfused = true,
       .num_layers = 6},
      {.name = "pp 4, untied, fp32", .pp = 4, .llama = true, .num_layers = 4},
      {.name = "pp 4, selective recompute, odd sizes (s 24, b 1), fp32",
       .pp = 4,
       .recompute = RecomputeGranularity::selective,
       .num_layers = 4,
       .seq_length = 24,
       .micro_batch = 1},
      {.name = "MoE, tp 2 + sp (experts whole on each rank), shared expert, capacity, selective MLP recompute, bf16",
       .tp = 2,
       .sp = true,
       .llama = true,
       .bf16 = true,
       .recompute = RecomputeGranularity::selective,
       .recompute_mlp = true,
       .moe_layers = "1"},
      {.name = "MoE and dense layers, tp 2 + sp, shared expert, selective moe and shared-expert recompute, fp32",
       .tp = 2,
       .sp = true,
       .llama = true,
       .recompute = RecomputeGranularity::selective,
       .recompute_mlp = true,
       .recompute_shared_experts = true,
       .recompute_moe = true,
       .moe_layers = "[1,0]"},
      {.name = "MoE Sinkhorn top-1, tp 2 + sp, full block recompute, fp32",
       .tp = 2,
       .sp = true,
       .llama = true,
       .recompute = RecomputeGranularity::full,
       .method = RecomputeMethod::block,
       .moe_layers = "1",
       .sinkhorn = true},
      {.name = "MoE, ep 2 (alltoall, capacity, global aux loss), distributed optimizer over dp and expert-dp, bf16",
       .llama = true,
       .bf16 = true,
       .distributed = true,
       .moe_layers = "1",
       .ep = 2},
      {.name = "MoE, ep 2, two distributed-optimizer instances over dp and expert-dp, fp32",
       .llama = true,
       .distributed = true,
       .instances = 2,
       .moe_layers = "1",
       .ep = 2},
      {.name = "cp 2 (p2p ring), bf16, untied", .llama = true, .bf16 = true, .cp = 2},
      {.name = "cp 2 (a2a) + tp 2 + sp, distributed optimizer, fp32",
       .tp = 2,
       .sp = true,
       .llama = true,
       .distributed = true,
       .cp = 2,
       .cp_type = CpCommType::a2a},
      {.name = "cp 2 (allgather), full block recompute of 2 layers, per-token loss, fp32",
       .per_token_loss = true,
       .recompute = RecomputeGranularity::full,
       .recompute_layers = 2,
       .cp = 2,
       .cp_type = CpCommType::allgather},
      {.name = "MoE, cp 2 (p2p) with ep 2 (alltoall), fp32",
       .llama = true,
       .moe_layers = "1",
       .ep = 2,
       .cp = 2},
      {.name = "MoE Sinkhorn top-1, cp 2 (a2a), fp32",
       .llama = true,
       .moe_layers = "1",
       .sinkhorn = true,
       .cp = 2,
       .cp_type = CpCommType::a2a},
      {.name = "Muon, tp 2 + sp, distributed optimizer, bf16, untied",
       .tp = 2,
       .sp = true,
       .llama = true,
       .bf16 = true,
       .distributed = true,
       .muon = true},
      {.name = "MoE, ep 2, Muon, distributed optimizer over dp and expert-dp, overlapped buckets, fp32",
       .llama = true,
       .distributed = true,
       .overlap = true,
       .moe_layers = "1",
       .ep = 2,
       .muon = true},
      {.name = "MoE and dense layers, pp 2 + dp, full uniform recompute, distributed optimizer, fp32",
       .pp = 2,
       .llama = true,
       .distributed = true,
       .recompute = RecomputeGranularity::full,
       .recompute_layers = 2,
       .num_layers = 4,
       .moe_layers = "[1,0,1,1]"},
  };
  int tested = 0;
  for (const Layout& l : layouts) {
    if (world().size() % (l.tp * l.pp * l.cp) != 0 || world().size() % (l.ep * l.pp) != 0) continue;
    // Instances divide dp and expert-dp (world / (pp · ep): the experts are whole, etp 1).
    if ((world().size() / (l.tp * l.pp)) % l.instances != 0 || (world().size() / (l.ep * l.pp)) % l.instances != 0)
      continue;
    SCOPED_TRACE(std::string(l.name) + " on " + std::to_string(world().size()) + " ranks");
    ModelConfig m = l.llama ? llama_style() : gpt2_style();
    m.num_layers = l.num_layers;
    m.seq_length = l.seq_length;
    m.tensor_model_parallel_size = l.tp;
    m.sequence_parallel = l.sp;
    m.context_parallel_size = l.cp;
    m.cp_comm_type = l.cp_type;
    m.recompute_granularity = l.recompute;
    m.recompute_method = l.method;
    m.recompute_num_layers = l.recompute_layers;
    m.recompute_mlp = l.recompute_mlp;
    m.recompute_shared_experts = l.recompute_shared_experts;
    m.recompute_moe = l.recompute_moe;
    if (l.unfused) m.attention_impl = AttentionImpl::unfused;
    if (l.moe_layers) {
      m.moe.num_experts = 4;
      m.moe.layer_freq = l.moe_layers;
      m.moe.ffn_hidden_size = 48;
      m.moe.expert_tensor_parallel_size = 1;
      m.moe.aux_loss_coeff = 1e-2;
      m.moe.z_loss_coeff = 1e-3;
      m.moe.expert_model_parallel_size = l.ep;
      if (l.ep > 1) {
        m.moe.dispatcher = MoeDispatcher::alltoall;
        m.moe.capacity.capacity_factor = 1.25;
        m.moe.load_balancing = MoeLoadBalancing::global_aux_loss;  // its counts summed over dp
      }
      if (l.tp > 1) {
        m.moe.shared_expert_intermediate_size = 32;
        m.moe.capacity.capacity_factor = 1.5;
        m.moe.load_balancing = MoeLoadBalancing::seq_aux_loss;
      }
      if (l.sinkhorn) {
        m.moe.load_balancing = MoeLoadBalancing::sinkhorn;
        m.moe.aux_loss_coeff = 0.0;
        m.moe.router.topk = 1;
      }
    }
    if (l.bf16) m.params_dtype = DType::bf16;
    TrainConfig run = short_run();
    run.train_iters = 2;
    run.schedule.lr_warmup_iters = 1;
    run.micro_batch_size = l.micro_batch;
    run.pipeline.pp = l.pp;
    if (l.vp > 1) run.pipeline.virtual_stages_per_rank = l.vp;
    run.use_distributed_optimizer = l.distributed;
    run.num_distributed_optimizer_instances = l.instances;
    run.overlap_grad_reduce = l.overlap;
    run.overlap_param_gather = l.overlap && l.distributed;
    if (l.overlap) run.ddp_bucket_size = 20000;
    run.calculate_per_token_loss = l.per_token_loss;
    run.loss_scale.bf16 = l.bf16;
    if (l.muon) run.optimizer.muon = MuonConfig{};
    Trainer trainer(m, run, &world());
    const TrainingLayout layout = training_layout(m, run, world().size(), {Device::cpu, cpu_backend().max_threads()});
    const std::vector<StepComm> plans = plan_comm(layout);
    const ProcessGroups& groups = trainer.groups();
    const auto pp_rank = static_cast<size_t>(groups.grid.dense_coords(world().rank()).pp);
    const StepComm& plan = plans.at(pp_rank);
    EXPECT_EQ(plan.size(CommGroup::tp), groups.tp->size());
    EXPECT_EQ(plan.size(CommGroup::pp), groups.pp->size());
    EXPECT_EQ(plan.size(CommGroup::embedding), groups.embedding->size());
    EXPECT_EQ(plan.size(CommGroup::dp), groups.dp_cp->size());
    EXPECT_EQ(plan.size(CommGroup::cp), groups.cp->size());
    if (l.moe_layers) EXPECT_EQ(plan.size(CommGroup::expert_dp), groups.expert_dp->size());
    for (int step = 1; step <= 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      CommTotals before[kCommGroups.size()];
      for (CommGroup g : kCommGroups) before[static_cast<size_t>(g)] = trainer.comm_totals(g);
      const IterationStats st = trainer.train_step();
      ASSERT_FALSE(st.skipped);  // a skipped step gathers no parameters: the plan's one data-dependent term
      for (CommGroup g : kCommGroups) expect_same(trainer.comm_totals(g) - before[static_cast<size_t>(g)], plan, g);
      EXPECT_DOUBLE_EQ(st.tp_bytes_sent, plan.sent_bytes(CommGroup::tp));
      EXPECT_DOUBLE_EQ(st.pp_bytes_sent, plan.sent_bytes(CommGroup::pp) + plan.sent_bytes(CommGroup::embedding));
      EXPECT_DOUBLE_EQ(st.dp_bytes_sent, plan.sent_bytes(CommGroup::dp) + plan.sent_bytes(CommGroup::expert_dp));
      EXPECT_DOUBLE_EQ(st.cp_bytes_sent, plan.sent_bytes(CommGroup::cp));
    }
    expect_same_memory(trainer.memory(), plan_memory(layout).at(pp_rank).total);
    ++tested;
  }
  EXPECT_GE(tested, world().size() == 4 ? 10 : 7);
}

}  // namespace
}  // namespace mt::test
