// plan/'s communication against real runs: every rank's calls and bytes of each kind over each
// counted group in a training step must be plan_comm's figures for its pipeline stage exactly,
// over tp (with and without sp), pp (1F1B and interleaved), dp (all-reduced or reduce-scattered
// buckets, overlapped or not), recomputation (full uniform and block, selective), fp32 and bf16,
// tied and untied embeddings.
#include <sstream>

#include "plan/comm_volume.h"
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
  bool overlap = false;  // --overlap-grad-reduce (and param gather) with buckets small enough to be several
  bool per_token_loss = false;
  RecomputeGranularity recompute = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
  int64_t recompute_layers = 1;
  bool recompute_mlp = false;
  int64_t num_layers = 2, seq_length = 32, micro_batch = 2;
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
        {"send", t.totals.send}, {"recv", t.totals.recv}};
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
      {"send", &CommTotals::send}, {"recv", &CommTotals::recv}};
  for (const auto& [name, kind] : kinds) {
    EXPECT_EQ((got.*kind).calls, (want.*kind).calls) << comm_group_name(group) << " " << name << " calls\n"
                                                      << describe(plan, group);
    EXPECT_EQ((got.*kind).bytes, (want.*kind).bytes) << comm_group_name(group) << " " << name << " bytes\n"
                                                     << describe(plan, group);
  }
}

// Each layout trains two steps on the whole job; each step's traffic over tp, pp, the embedding
// group and dp on every rank must be plan_comm's for its pipeline rank, call for call and byte
// for byte (and so must the bytes the step reports sending).
TEST(PlanComm, EveryRanksStepTrafficIsThePlans) {
  const Layout layouts[] = {
      {.name = "tp 2, fp32, two cross-entropy chunks", .tp = 2, .seq_length = 160, .micro_batch = 4},
      {.name = "tp 2 + sp, bf16, selective recompute of the MLP, untied",
       .tp = 2,
       .sp = true,
       .llama = true,
       .bf16 = true,
       .recompute = RecomputeGranularity::selective,
       .recompute_mlp = true},
      {.name = "pp 2 (1F1B), fp32, tied", .pp = 2},
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
      {.name = "dp, all-reduced buckets overlapped, per-token loss, fp32", .overlap = true, .per_token_loss = true},
      {.name = "tp 2, full block recompute, distributed optimizer, fp32",
       .tp = 2,
       .distributed = true,
       .recompute = RecomputeGranularity::full,
       .method = RecomputeMethod::block},
      {.name = "tp 2 + sp + pp 2, full uniform recompute (groups of 2 over 3 layers), bf16, tied",
       .tp = 2,
       .pp = 2,
       .sp = true,
       .bf16 = true,
       .recompute = RecomputeGranularity::full,
       .recompute_layers = 2,
       .num_layers = 6},
      {.name = "pp 4, untied, fp32", .pp = 4, .llama = true, .num_layers = 4},
  };
  int tested = 0;
  for (const Layout& l : layouts) {
    if (world().size() % (l.tp * l.pp) != 0) continue;
    SCOPED_TRACE(std::string(l.name) + " on " + std::to_string(world().size()) + " ranks");
    ModelConfig m = l.llama ? llama_style() : gpt2_style();
    m.num_layers = l.num_layers;
    m.seq_length = l.seq_length;
    m.tensor_model_parallel_size = l.tp;
    m.sequence_parallel = l.sp;
    m.recompute_granularity = l.recompute;
    m.recompute_method = l.method;
    m.recompute_num_layers = l.recompute_layers;
    m.recompute_mlp = l.recompute_mlp;
    if (l.bf16) m.params_dtype = DType::bf16;
    TrainConfig run = short_run();
    run.train_iters = 2;
    run.schedule.lr_warmup_iters = 1;
    run.micro_batch_size = l.micro_batch;
    run.pipeline.pp = l.pp;
    if (l.vp > 1) run.pipeline.virtual_stages_per_rank = l.vp;
    run.use_distributed_optimizer = l.distributed;
    run.overlap_grad_reduce = l.overlap;
    run.overlap_param_gather = l.overlap && l.distributed;
    if (l.overlap) run.ddp_bucket_size = 20000;
    run.calculate_per_token_loss = l.per_token_loss;
    run.loss_scale.bf16 = l.bf16;
    Trainer trainer(m, run, &world());
    const std::vector<StepComm> plans = plan_comm(training_layout(m, run, world().size(), cpu_backend().max_threads()));
    const ProcessGroups& groups = trainer.groups();
    const StepComm& plan = plans.at(static_cast<size_t>(groups.grid.dense_coords(world().rank()).pp));
    EXPECT_EQ(plan.size(CommGroup::tp), groups.tp->size());
    EXPECT_EQ(plan.size(CommGroup::pp), groups.pp->size());
    EXPECT_EQ(plan.size(CommGroup::embedding), groups.embedding->size());
    EXPECT_EQ(plan.size(CommGroup::dp), groups.dp->size());
    for (int step = 1; step <= 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      CommTotals before[4];
      for (CommGroup g : kCommGroups) before[static_cast<size_t>(g)] = trainer.comm_totals(g);
      const IterationStats st = trainer.train_step();
      ASSERT_FALSE(st.skipped);  // a skipped step gathers no parameters: the plan's one data-dependent term
      for (CommGroup g : kCommGroups) expect_same(trainer.comm_totals(g) - before[static_cast<size_t>(g)], plan, g);
      EXPECT_DOUBLE_EQ(st.tp_bytes_sent, plan.sent_bytes(CommGroup::tp));
      EXPECT_DOUBLE_EQ(st.pp_bytes_sent, plan.sent_bytes(CommGroup::pp) + plan.sent_bytes(CommGroup::embedding));
      EXPECT_DOUBLE_EQ(st.dp_bytes_sent, plan.sent_bytes(CommGroup::dp));
    }
    ++tested;
  }
  EXPECT_GE(tested, world().size() == 4 ? 9 : 7);
}

}  // namespace
}  // namespace mt::test
