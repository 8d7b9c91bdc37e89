// The MoE token dispatchers (parallel/expert_dispatch.h), both types, on every expert layout the
// job's size allows (ep × etp: 2×1, 1×2 on two ranks; 2×1, 4×1, 2×2, 1×2 on four), dropless and with
// capacity (both drop policies, padding):
//   - dispatch ∘ identity experts ∘ combine is Σ_e p_te · x_t exactly, forward and backward (values
//     chosen so every product and sum is exact in f32, whatever the order);
//   - against the unsharded reference: every rank builds the group's whole problem (each source
//     rank's tokens, its own router and capacity), runs the ops over all of it with whole weights, and
//     checks its output, token and routing-prob gradients and its expert-weight shard gradients;
//   - one rank (ExpertParallel{}) is the ops bit for bit; a routing map beyond the bounds fails on
//     every rank (no hang); a routing that sends everything to one ep rank fills its worst case;
//   - the expert process groups are the grid's.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/moe_experts.h"
#include "ops/moe_router.h"
#include "parallel/expert_dispatch.h"
#include "parallel/process_groups.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

constexpr int64_t kT = 8, kH = 16, kE = 8, kK = 2, kFfn = 8;
// Whole-problem sums differ from the sharded ones only in order: a few fp32 ulps of O(1) values.
constexpr double kTol = 2e-5;

const MoeDispatcherType kTypes[] = {MoeDispatcherType::allgather, MoeDispatcherType::alltoall};
const char* type_name(MoeDispatcherType t) { return t == MoeDispatcherType::alltoall ? "alltoall" : "allgather"; }

struct CapacityCase {
  const char* name;
  MoeCapacityOptions options;
};
// T·k/E = 2 tokens per expert on average: factor 1 drops, 0.5 drops more, 1.5 with padding pads
// every expert to 3 slots, 5 with padding keeps all T tokens for every expert (C = 10 > T).
const std::vector<CapacityCase>& capacity_cases() {
  static const std::vector<CapacityCase> cases = {
      {"dropless", {}},
      {"factor 1, drop by probs", {1.0, MoeDropPolicy::probs, false}},
      {"factor 0.5, drop by position", {0.5, MoeDropPolicy::position, false}},
      {"factor 1.5, padded", {1.5, MoeDropPolicy::probs, true}},
      {"factor 5, padded (C > T)", {5.0, MoeDropPolicy::position, true}},
  };
  return cases;
}

struct Layout {
  int ep, etp;
};
// The layouts the job's size holds (ep·etp divides it).
std::vector<Layout> layouts() {
  const int n = world().size();
  std::vector<Layout> out = {{2, 1}, {1, 2}};
  if (n == 4) out.insert(out.end(), {{4, 1}, {2, 2}});
  return out;
}

ProcessGroups expert_groups(Layout layout) {
  GridConfig config;
  config.ep = layout.ep;
  config.etp = layout.etp;
  return make_process_groups(world(), config);
}

ExpertParallel expert_parallel(ProcessGroups& g) { return ExpertParallel{g.ep.get(), g.etp.get(), g.etp_ep.get()}; }

ExpertDispatchOptions options_for(MoeDispatcherType type, const MoeCapacityOptions& capacity) {
  ExpertDispatchOptions o;
  o.type = type;
  o.num_experts = kE;
  o.topk = kK;
  o.capacity = capacity;
  o.tokens = kT;
  o.hidden = kH;
  return o;
}

// Rows [first, first + part.dim(0)) of full = part.
void put_rows(HostTensor& full, HostTensor& part, int64_t first) {
  const size_t row = part.bytes.size() / static_cast<size_t>(part.shape[0]);
  std::memcpy(full.bytes.data() + static_cast<size_t>(first) * row, part.bytes.data(), part.bytes.size());
}

// The group's routing: each of the G source ranks routes its own T tokens (capacity per rank, as
// Megatron's router applies it), stacked: probs f32 [G·T, E], map u8 [G·T, E].
struct Routing {
  HostTensor probs, map;
};
Routing route(int64_t sources, const MoeCapacityOptions& capacity, uint64_t seed, bool skewed = false) {
  Routing r{zeros({sources * kT, kE}), zeros({sources * kT, kE}, DType::u8)};
  for (int64_t q = 0; q < sources; ++q) {
    HostTensor logits = randn({kT, kE}, seed + static_cast<uint64_t>(q));
    if (skewed)  // every token picks experts 0 .. k-1
      for (int64_t t = 0; t < kT; ++t)
        for (int64_t e = 0; e < kK; ++e) logits.f32()[t * kE + e] += 100.0f;
    HostTensor p = zeros({kT, kK}), i = zeros({kT, kK}, DType::i32);
    MoeRouterOptions router;
    router.topk = kK;
    moe_router_fwd(p.view(), i.view(), logits.view(), TensorView(), TensorView(), router);
    HostTensor probs = zeros({kT, kE}), map = zeros({kT, kE}, DType::u8);
    moe_routing_map_fwd(probs.view(), map.view(), p.view(), i.view(), capacity);
    put_rows(r.probs, probs, q * kT);
    put_rows(r.map, map, q * kT);
  }
  return r;
}

// Source q's routing map (u8 [T, E]).
HostTensor map_of(Routing& r, int64_t q) {
  HostTensor map = zeros({kT, kE}, DType::u8);
  std::memcpy(map.u8(), r.map.u8() + q * kT * kE, static_cast<size_t>(kT * kE));
  return map;
}

// The routing does what its case says: every choice kept (dropless), some dropped, or exactly
// min(C, T) slots per expert and source (padded).
void expect_case_holds(Routing& r, const MoeCapacityOptions& c, int64_t sources) {
  int64_t entries = 0;
  for (int64_t i = 0; i < r.map.numel(); ++i) entries += r.map.u8()[i] != 0;
  if (!c.capacity_factor) {
    EXPECT_EQ(entries, sources * kT * kK);
  } else if (!c.pad_to_capacity) {
    EXPECT_LT(entries, sources * kT * kK) << "the capacity should drop some choices";
  } else {
    EXPECT_EQ(entries, sources * kE * std::min(moe_expert_capacity(kT, kE, kK, *c.capacity_factor), kT));
  }
}

// A dispatcher's buffers, sized by a measuring arena first.
struct Buffers {
  std::unique_ptr<Arena> arena;
  ExpertDispatchSaved saved;
  ExpertDispatchScratch scratch;
};
Buffers carve(const ExpertDispatchOptions& o, const ExpertParallel& g) {
  Arena measure(MemCategory::activations);
  alloc_expert_dispatch_saved(measure, o, g);
  alloc_expert_dispatch_scratch(measure, o, g);
  Buffers b;
  b.arena = std::make_unique<Arena>(cpu_backend(), MemCategory::activations, measure.used(), nullptr);
  b.saved = alloc_expert_dispatch_saved(*b.arena, o, g);
  b.scratch = alloc_expert_dispatch_scratch(*b.arena, o, g);
  EXPECT_EQ(b.arena->used(), measure.used());
  return b;
}

int64_t mismatches(HostTensor& actual, const std::vector<double>& expected) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < actual.numel(); ++i) wrong += actual.f32()[i] != expected[static_cast<size_t>(i)];
  return wrong;
}

// Values m/8 with small integers m: every product with a weight c/256 and every sum here is exact.
HostTensor small_dyadic(Shape s, int32_t range, uint64_t seed) {
  HostTensor ints = randint(s, 2 * range + 1, seed), out = zeros(s);
  for (int64_t i = 0; i < out.numel(); ++i) out.f32()[i] = static_cast<float>(ints.i32()[i] - range) / 8.0f;
  return out;
}

TEST(ExpertDispatch, IdentityExpertsGiveTheWeightedTokensExactly) {
  for (Layout layout : layouts()) {
    ProcessGroups pg = expert_groups(layout);
    const ExpertParallel g = expert_parallel(pg);
    const int64_t sources = g.etp_ep->size(), q = g.etp_ep->rank();
    for (const CapacityCase& cap : capacity_cases())
      for (MoeDispatcherType type : kTypes) {
        SCOPED_TRACE(std::string(type_name(type)) + " ep " + std::to_string(layout.ep) + " etp " +
                     std::to_string(layout.etp) + ", " + cap.name);
        Routing all = route(sources, cap.options, 10);
        expect_case_holds(all, cap.options, sources);
        HostTensor probs = row_block(all.probs, static_cast<int>(sources), static_cast<int>(q));
        HostTensor map = map_of(all, q);
        // Dyadic weights where the router put a nonzero one (padding slots keep 0).
        HostTensor weights = randint({kT, kE}, 255, 11 + static_cast<uint64_t>(q));
        for (int64_t i = 0; i < kT * kE; ++i)
          if (probs.f32()[i] != 0.0f) probs.f32()[i] = static_cast<float>(1 + weights.i32()[i]) / 256.0f;
        HostTensor x = small_dyadic({kT, kH}, 16, 12 + static_cast<uint64_t>(q));
        HostTensor dout = small_dyadic({kT, kH}, 16, 13 + static_cast<uint64_t>(q));

        const ExpertDispatchOptions o = options_for(type, cap.options);
        Buffers b = carve(o, g);
        expert_dispatch_fwd(o, g, b.saved, b.scratch, x.view(), probs.view(), map.view());
        const int64_t rows = b.saved.num_rows;
        EXPECT_LE(rows, expert_dispatch_max_rows(o, g));
        // Identity experts: each etp rank contributes rows/etp, so the etp sum is the row itself.
        HostTensor y = zeros({rows, kH});
        copy_tensor(y.view(), b.saved.expert_rows());
        scale_inplace(y.view(), 1.0f / static_cast<float>(layout.etp));
        HostTensor out = zeros({kT, kH});
        expert_combine_fwd(o, g, b.saved, b.scratch, out.view(), y.view());

        HostTensor dy = zeros({rows, kH}), dprobs = zeros({kT, kE}), dx = zeros({kT, kH});
        expert_combine_bwd(o, g, b.saved, b.scratch, dy.view(), dprobs.view(), dout.view());
        scale_inplace(dy.view(), 1.0f / static_cast<float>(layout.etp));
        expert_dispatch_bwd(o, g, b.saved, b.scratch, dx.view(), dy.view());

        std::vector<double> out_ref(kT * kH, 0.0), dx_ref(kT * kH, 0.0), dprobs_ref(kT * kE, 0.0);
        for (int64_t t = 0; t < kT; ++t)
          for (int64_t e = 0; e < kE; ++e) {
            if (map.u8()[t * kE + e] == 0) continue;
            const double p = probs.f32()[t * kE + e];
            double dot = 0.0;
            for (int64_t c = 0; c < kH; ++c) {
              out_ref[t * kH + c] += p * x.f32()[t * kH + c];
              dx_ref[t * kH + c] += p * dout.f32()[t * kH + c];
              dot += static_cast<double>(x.f32()[t * kH + c]) * dout.f32()[t * kH + c];
            }
            dprobs_ref[t * kE + e] = dot;
          }
        EXPECT_EQ(mismatches(out, out_ref), 0) << "output elements";
        EXPECT_EQ(mismatches(dx, dx_ref), 0) << "token gradient elements";
        EXPECT_EQ(mismatches(dprobs, dprobs_ref), 0) << "routing-prob gradient elements";
      }
  }
}

// The experts' weights of the whole problem; each rank holds its ep rank's experts, etp shard
// (fc1 rows, SwiGLU's gate and up halves split separately; fc2 columns).
struct Experts {
  MoeExpertsOptions options;
  HostTensor w1, w2;  // [E, f1, h], [E, h, ffn]
  int64_t blocks;
};
Experts make_experts(MoeExpertActivation activation) {
  MoeExpertsOptions o;
  o.activation = activation;
  o.impl = MoeExpertsImpl::sequential;
  const int64_t blocks = activation == MoeExpertActivation::swiglu ? 2 : 1;
  return {o, randn({kE, blocks * kFfn, kH}, 20, 0.3f), randn({kE, kH, kFfn}, 21, 0.3f), blocks};
}
HostTensor local_experts(HostTensor& whole, ShardSpec spec, const ExpertParallel& g) {
  HostTensor shard = shard_of(whole, spec, g.etp_size(), g.etp_rank());
  return row_block(shard, g.ep_size(), g.ep_rank());
}

// The reference over all sources' tokens at once (G·T rows) with whole weights.
struct Reference {
  HostTensor out, dx, dprobs, dw1, dw2;
  HostTensor tokens_per_expert;
};
Reference run_reference(Experts& ex, HostTensor& x, Routing& r, HostTensor& dout) {
  const int64_t n = x.shape[0], f1 = ex.w1.shape[1];
  const int64_t rows = moe_permuted_rows(r.map.view());
  HostTensor perm = zeros({rows, kH}), row_token = zeros({rows}, DType::i32), y = zeros({rows, kH});
  HostTensor pre = zeros({rows, f1}), act = zeros({rows, kFfn}), dact = zeros({rows, kFfn}), dpre = zeros({rows, f1});
  Reference ref{zeros({n, kH}), zeros({n, kH}), zeros({n, kE}), zeros(ex.w1.shape), zeros(ex.w2.shape),
                zeros({kE}, DType::i32)};
  moe_permute_fwd(perm.view(), row_token.view(), ref.tokens_per_expert.view(), x.view(), r.map.view());
  moe_experts_fwd(y.view(), pre.view(), act.view(), perm.view(), ref.tokens_per_expert.view(), ex.w1.view(),
                  ex.w2.view(), ex.options);
  moe_unpermute_fwd(ref.out.view(), y.view(), row_token.view(), ref.tokens_per_expert.view(), r.probs.view());
  HostTensor dy = zeros({rows, kH}), dperm = zeros({rows, kH});
  moe_unpermute_bwd(dy.view(), ref.dprobs.view(), dout.view(), y.view(), row_token.view(),
                    ref.tokens_per_expert.view(), r.probs.view());
  moe_experts_bwd(dperm.view(), ref.dw1.view(), ref.dw2.view(), dy.view(), perm.view(), pre.view(),
                  ref.tokens_per_expert.view(), ex.w1.view(), ex.w2.view(), act.view(), dact.view(), dpre.view(),
                  ex.options);
  moe_permute_bwd(ref.dx.view(), dperm.view(), row_token.view());
  return ref;
}

TEST(ExpertDispatch, MatchesTheUnshardedReference) {
  for (Layout layout : layouts()) {
    ProcessGroups pg = expert_groups(layout);
    const ExpertParallel g = expert_parallel(pg);
    const int64_t sources = g.etp_ep->size(), q = g.etp_ep->rank(), el = kE / layout.ep;
    for (size_t c = 0; c < capacity_cases().size(); ++c)
      for (MoeDispatcherType type : kTypes) {
        const CapacityCase& cap = capacity_cases()[c];
        const bool swiglu = c % 2 == 1;  // alternate cases, so both activations meet every layout
        SCOPED_TRACE(std::string(type_name(type)) + " ep " + std::to_string(layout.ep) + " etp " +
                     std::to_string(layout.etp) + ", " + cap.name + (swiglu ? ", swiglu" : ", gelu"));
        Experts ex = make_experts(swiglu ? MoeExpertActivation::swiglu : MoeExpertActivation::pointwise);
        Routing all = route(sources, cap.options, 30);
        HostTensor x_all = randn({sources * kT, kH}, 31), dout_all = randn({sources * kT, kH}, 32);
        Reference ref = run_reference(ex, x_all, all, dout_all);

        const int s = static_cast<int>(sources), me = static_cast<int>(q);
        HostTensor x = row_block(x_all, s, me), dout = row_block(dout_all, s, me), probs = row_block(all.probs, s, me);
        HostTensor map = map_of(all, q);
        const ShardSpec fc1{1, ex.blocks}, fc2{2, 1};
        HostTensor w1 = local_experts(ex.w1, fc1, g), w2 = local_experts(ex.w2, fc2, g);
        const int64_t f1 = w1.shape[1], ffn = w2.shape[2];

        const ExpertDispatchOptions o = options_for(type, cap.options);
        Buffers b = carve(o, g);
        expert_dispatch_fwd(o, g, b.saved, b.scratch, x.view(), probs.view(), map.view());
        const int64_t rows = b.saved.num_rows;
        EXPECT_LE(rows, expert_dispatch_max_rows(o, g));
        for (int64_t e = 0; e < el; ++e)
          EXPECT_EQ(b.saved.tokens_per_expert[e], ref.tokens_per_expert.i32()[g.ep_rank() * el + e]) << "expert " << e;
        HostTensor y = zeros({rows, kH}), pre = zeros({rows, f1}), act = zeros({rows, ffn});
        moe_experts_fwd(y.view(), pre.view(), act.view(), b.saved.expert_rows(), b.saved.expert_counts(), w1.view(),
                        w2.view(), ex.options);
        HostTensor out = zeros({kT, kH});
        expert_combine_fwd(o, g, b.saved, b.scratch, out.view(), y.view());

        HostTensor dy = zeros({rows, kH}), drows = zeros({rows, kH}), dact = zeros({rows, ffn}),
                   dpre = zeros({rows, f1});
        HostTensor dprobs = zeros({kT, kE}), dx = zeros({kT, kH}), dw1 = zeros(w1.shape), dw2 = zeros(w2.shape);
        expert_combine_bwd(o, g, b.saved, b.scratch, dy.view(), dprobs.view(), dout.view());
        moe_experts_bwd(drows.view(), dw1.view(), dw2.view(), dy.view(), b.saved.expert_rows(), pre.view(),
                        b.saved.expert_counts(), w1.view(), w2.view(), act.view(), dact.view(), dpre.view(),
                        ex.options);
        expert_dispatch_bwd(o, g, b.saved, b.scratch, dx.view(), drows.view());

        HostTensor out_ref = row_block(ref.out, s, me), dx_ref = row_block(ref.dx, s, me),
                   dprobs_ref = row_block(ref.dprobs, s, me);
        HostTensor dw1_ref = local_experts(ref.dw1, fc1, g), dw2_ref = local_experts(ref.dw2, fc2, g);
        expect_close(out, out_ref, kTol, kTol, "output");
        expect_close(dx, dx_ref, kTol, kTol, "token gradient");
        expect_close(dprobs, dprobs_ref, kTol, kTol, "routing-prob gradient");
        expect_close(dw1, dw1_ref, kTol, kTol, "fc1 weight gradient (local experts, etp shard)");
        expect_close(dw2, dw2_ref, kTol, kTol, "fc2 weight gradient (local experts, etp shard)");
      }
  }
}

// ExpertParallel{}: no communication, the ops themselves bit for bit (output and every gradient).
TEST(ExpertDispatch, OneRankIsThePlainOpsBitForBit) {
  const ExpertParallel none;
  for (const CapacityCase& cap : capacity_cases())
    for (MoeDispatcherType type : kTypes) {
      SCOPED_TRACE(std::string(type_name(type)) + ", " + cap.name);
      Experts ex = make_experts(MoeExpertActivation::swiglu);
      Routing r = route(1, cap.options, 40 + static_cast<uint64_t>(world().rank()));
      HostTensor x = randn({kT, kH}, 41), dout = randn({kT, kH}, 42);
      Reference ref = run_reference(ex, x, r, dout);

      const ExpertDispatchOptions o = options_for(type, cap.options);
      Buffers b = carve(o, none);
      expert_dispatch_fwd(o, none, b.saved, b.scratch, x.view(), r.probs.view(), r.map.view());
      const int64_t rows = b.saved.num_rows, f1 = 2 * kFfn;
      HostTensor y = zeros({rows, kH}), pre = zeros({rows, f1}), act = zeros({rows, kFfn});
      moe_experts_fwd(y.view(), pre.view(), act.view(), b.saved.expert_rows(), b.saved.expert_counts(),
                      ex.w1.view(), ex.w2.view(), ex.options);
      HostTensor out = zeros({kT, kH});
      expert_combine_fwd(o, none, b.saved, b.scratch, out.view(), y.view());
      HostTensor dy = zeros({rows, kH}), drows = zeros({rows, kH}), dact = zeros({rows, kFfn}),
                 dpre = zeros({rows, f1});
      HostTensor dprobs = zeros({kT, kE}), dx = zeros({kT, kH}), dw1 = zeros(ex.w1.shape), dw2 = zeros(ex.w2.shape);
      expert_combine_bwd(o, none, b.saved, b.scratch, dy.view(), dprobs.view(), dout.view());
      moe_experts_bwd(drows.view(), dw1.view(), dw2.view(), dy.view(), b.saved.expert_rows(), pre.view(),
                      b.saved.expert_counts(), ex.w1.view(), ex.w2.view(), act.view(), dact.view(), dpre.view(),
                      ex.options);
      expert_dispatch_bwd(o, none, b.saved, b.scratch, dx.view(), drows.view());
      EXPECT_EQ(mismatches(out, to_double(ref.out)), 0) << "output";
      EXPECT_EQ(mismatches(dx, to_double(ref.dx)), 0) << "token gradient";
      EXPECT_EQ(mismatches(dprobs, to_double(ref.dprobs)), 0) << "routing-prob gradient";
      EXPECT_EQ(mismatches(dw1, to_double(ref.dw1)), 0) << "fc1 weight gradient";
      EXPECT_EQ(mismatches(dw2, to_double(ref.dw2)), 0) << "fc2 weight gradient";
    }
}

// Every token of every source picks experts 0 and 1 (ep rank 0's): that rank's experts receive
// exactly the dropless bound R_max = G·T·min(k, E_l); with capacity, the bound with C.
TEST(ExpertDispatch, SkewedRoutingReachesTheWorstCase) {
  for (Layout layout : layouts()) {
    ProcessGroups pg = expert_groups(layout);
    const ExpertParallel g = expert_parallel(pg);
    const int64_t sources = g.etp_ep->size(), q = g.etp_ep->rank();
    for (MoeDispatcherType type : kTypes)
      for (int c : {0, 3}) {  // dropless; factor 1.5 padded (C = 3: A = E_l·3)
        const CapacityCase& cap = capacity_cases()[c];
        SCOPED_TRACE(std::string(type_name(type)) + " ep " + std::to_string(layout.ep) + " etp " +
                     std::to_string(layout.etp) + ", " + cap.name);
        Routing all = route(sources, cap.options, 50, /*skewed=*/true);
        HostTensor probs = row_block(all.probs, static_cast<int>(sources), static_cast<int>(q));
        HostTensor map = map_of(all, q), x = randn({kT, kH}, 51);
        const ExpertDispatchOptions o = options_for(type, cap.options);
        Buffers b = carve(o, g);
        expert_dispatch_fwd(o, g, b.saved, b.scratch, x.view(), probs.view(), map.view());
        const int64_t el = kE / layout.ep, bound = sources * (c == 0 ? kT * std::min(kK, el) : el * 3);
        EXPECT_EQ(expert_dispatch_max_rows(o, g), bound);
        if (g.ep_rank() == 0) {
          EXPECT_EQ(b.saved.num_rows, bound);
        }
      }
  }
}

// A routing map that breaks the options' bounds on one rank only (two experts per token with
// --moe-router-topk 1) fails on every rank of the group with the same kind of message.
TEST(ExpertDispatch, MapBeyondTheBoundsFailsOnEveryRank) {
  for (Layout layout : layouts()) {
    ProcessGroups pg = expert_groups(layout);
    const ExpertParallel g = expert_parallel(pg);
    for (MoeDispatcherType type : kTypes) {
      SCOPED_TRACE(std::string(type_name(type)) + " ep " + std::to_string(layout.ep) + " etp " +
                   std::to_string(layout.etp));
      ExpertDispatchOptions o = options_for(type, {});
      o.topk = 1;
      Routing r = route(1, {}, 60);  // k = 2 per token
      if (g.etp_ep->rank() != 0)     // the others keep each token's first expert only: within the bounds
        for (int64_t t = 0; t < kT; ++t) {
          uint8_t* row = r.map.u8() + t * kE;
          for (int64_t e = 0, kept = 0; e < kE; ++e) kept += row[e] = row[e] && kept == 0;
        }
      HostTensor x = randn({kT, kH}, 61);
      Buffers b = carve(o, g);
      expect_error_mentioning(
          [&] { expert_dispatch_fwd(o, g, b.saved, b.scratch, x.view(), r.probs.view(), r.map.view()); },
          "make the routing map with moe_routing_map_fwd and the same options");
    }
  }
}

// The expert groups are the grid's (expert rank generator), in size and in this rank's position.
TEST(ExpertDispatch, ProcessGroupsHoldTheGridsExpertGroups) {
  for (Layout layout : layouts()) {
    ProcessGroups pg = expert_groups(layout);
    const int r = world().rank();
    const std::pair<GridRole, Communicator*> roles[] = {
        {GridRole::ep, pg.ep.get()}, {GridRole::etp, pg.etp.get()}, {GridRole::etp_ep, pg.etp_ep.get()},
        {GridRole::expert_dp, pg.expert_dp.get()}};
    for (const auto& [role, comm] : roles) {
      ASSERT_NE(comm, nullptr) << grid_role_name(role);
      EXPECT_EQ(comm->size(), static_cast<int>(pg.grid.group(role, r).size())) << grid_role_name(role);
      EXPECT_EQ(comm->rank(), pg.grid.rank_in_group(role, r)) << grid_role_name(role);
    }
    EXPECT_EQ(pg.ep->size(), layout.ep);
    EXPECT_EQ(pg.etp->size(), layout.etp);
    // The communicators connect the grid's ranks: the sum of world ranks over each group.
    for (const auto& [role, comm] : roles) {
      int sum = r, expected = 0;
      comm->all_reduce(TensorView(&sum, DType::i32, {1}), ReduceOp::sum);
      for (int member : pg.grid.group(role, r)) expected += member;
      EXPECT_EQ(sum, expected) << grid_role_name(role);
    }
  }
}

}  // namespace
}  // namespace mt::test
