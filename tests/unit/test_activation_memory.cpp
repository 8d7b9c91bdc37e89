// The activation ledger (model/activation_ledger: the bytes of the buffers a stage carves for one
// layer) against plan/'s formulas, entry by entry, over a grid of configurations; and, for the
// five configurations of Korthikanti et al. (2205.05198) with 16-bit activations, the unfused
// attention path and dropout on, against the paper's per-layer bytes less what this code remakes
// instead of keeping, plus what it keeps beyond them (stated below), exactly.
#include "backend/arena.h"
#include "model/activation_ledger.h"
#include "model/stage.h"
#include "optim/optimizer.h"
#include "plan/activation_memory.h"
#include "plan/model_state.h"
#include "testing.h"

namespace mt {
namespace {

// The ledger of the buffers Stage would carve for one layer of `c` (a measuring arena: no memory).
std::vector<LedgerEntry> measured(const ModelConfig& c, int64_t b, MlpKinds kinds = {true, false}) {
  Arena measure(MemCategory::activations);
  const int64_t sp = c.sequence_parallel ? c.tensor_model_parallel_size : 1;
  return layer_ledger(alloc_layer_activations(measure, c.tp_local(), {c.seq_length, b, sp}, c.params_dtype, kinds));
}

void expect_same_entries(const std::vector<LedgerEntry>& actual, const std::vector<LedgerEntry>& formula) {
  ASSERT_EQ(actual.size(), formula.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].what, formula[i].what);
    EXPECT_EQ(actual[i].bytes, formula[i].bytes) << actual[i].what;
  }
}

struct Korthikanti {
  const char* name;
  int64_t t;
  bool sp, selective;
};

TEST(ActivationMemory, KorthikantiConfigurationsKeepThePapersBytesLessWhatIsRemade) {
  const int64_t h = 64, a = 8, s = 32, b = 2, L = 1;
  for (const Korthikanti k : {Korthikanti{"no parallelism", 1, false, false}, Korthikanti{"tensor parallel", 4, false, false},
                              Korthikanti{"tensor + sequence parallel", 4, true, false},
                              Korthikanti{"tensor parallel + selective recompute", 4, false, true},
                              Korthikanti{"tensor + sequence parallel + selective recompute", 4, true, true}}) {
    SCOPED_TRACE(k.name);
    ModelConfig c;
    c.num_layers = L;
    c.hidden_size = h;
    c.num_attention_heads = a;
    c.seq_length = s;
    c.vocab_size = 128;
    c.params_dtype = DType::bf16;
    c.hidden_dropout = c.attention_dropout = 0.1f;
    c.tensor_model_parallel_size = k.t;
    c.sequence_parallel = k.sp;
    // Selective recomputation of the attention core: its probabilities are never kept (the flash
    // path, which keeps a log-sum-exp per query and head instead).
    c.attention_impl = k.selective ? AttentionImpl::flash : AttentionImpl::unfused;
    c.recompute_granularity = k.selective ? RecomputeGranularity::selective : RecomputeGranularity::none;
    c.finalize();
    const int64_t t = k.t, sbh = s * b * h, as2b = a * s * s * b;

    // The paper's bytes per layer: Table 2 (with its selective rows dropping 5·a·s²·b).
    const int64_t split = k.sp ? t : 1;  // what SP splits: the paper's 10·s·b·h term
    const int64_t paper = 10 * sbh / split + 24 * sbh / t + (k.selective ? 0 : 5 * as2b / t);
    // Not kept here: the two norm outputs (2 + 2 bytes per element, split with the norms) and the
    // MLP activation's output (8, split by tp): each is remade in the backward.
    const int64_t remade = 4 * sbh / split + 8 * sbh / t;
    // Kept beyond the paper: each norm's mean and rstd (f32 per token), and under selective
    // recomputation the attention's log-sum-exp (f32 per query and head).
    const int64_t extra = 2 * 8 * s * b / split + (k.selective ? 4 * a * s * b / t : 0);

    const std::vector<LedgerEntry> ledger = measured(c, b);
    expect_same_entries(ledger, layer_activation_formula(c, b, {0, L, true, true}, 0));
    EXPECT_EQ(ledger_bytes(ledger), paper - remade + extra);
  }
}

TEST(ActivationMemory, TheFormulaIsTheLedgerAcrossConfigurations) {
  int cases = 0;
  for (const Normalization norm : {Normalization::layernorm, Normalization::rmsnorm})
    for (const Activation act : {Activation::gelu, Activation::swiglu})
      for (const int64_t groups : {8, 2})
        for (const DType dtype : {DType::f32, DType::bf16, DType::f16})
          for (const AttentionImpl impl : {AttentionImpl::flash, AttentionImpl::unfused})
            for (const float dropout : {0.0f, 0.1f})
              for (const bool recompute_mlp : {false, true})
                for (const int64_t t : {1, 2})
                  for (const bool sp : {false, true}) {
                    if (sp && t == 1) continue;
                    ModelConfig c;
                    c.hidden_size = 48;
                    c.num_attention_heads = 8;
                    c.num_query_groups = groups;
                    c.qk_layernorm = groups == 2;  // the query and key norms' inputs and statistics
                    c.seq_length = 12;
                    c.vocab_size = 100;
                    c.normalization = norm;
                    c.activation = act;
                    c.params_dtype = dtype;
                    c.attention_impl = impl;
                    c.hidden_dropout = c.attention_dropout = dropout;
                    c.tensor_model_parallel_size = t;
                    c.sequence_parallel = sp;
                    if (recompute_mlp) {
                      c.recompute_granularity = RecomputeGranularity::selective;
                      c.recompute_core_attn = impl == AttentionImpl::flash;
                      c.recompute_mlp = true;
                    }
                    c.finalize();
                    SCOPED_TRACE(c.summary() + " tp " + std::to_string(t) + (sp ? " sp" : ""));
                    expect_same_entries(measured(c, 3), layer_activation_formula(c, 3, {0, c.num_layers, true, true}, 0));
                    ++cases;
                  }
  EXPECT_EQ(cases, 2 * 2 * 2 * 3 * 2 * 2 * 2 * 3);
}

// MoE layers: the router's outputs, the routing and the permuted rows at their worst case.
TEST(ActivationMemory, TheFormulaIsTheLedgerForMoeLayers) {
  int cases = 0;
  for (const Activation act : {Activation::gelu, Activation::swiglu})
    for (const DType dtype : {DType::f32, DType::bf16})
      for (const int capacity : {0, 1, 2})  // dropless, a factor, a factor with padding
        for (const MoeLoadBalancing balancing : {MoeLoadBalancing::none, MoeLoadBalancing::aux_loss,
                                                 MoeLoadBalancing::seq_aux_loss})
          for (const int64_t shared : {0, 16})
            for (const int64_t t : {1, 2})
              for (const int recompute : {0, 1, 2}) {  // none; mlp and shared_experts; moe
              ModelConfig c;
              c.num_layers = 2;
              c.hidden_size = 48;
              c.num_attention_heads = 8;
              c.seq_length = 12;
              c.vocab_size = 100;
              c.activation = act;
              c.params_dtype = dtype;
              c.add_bias_linear = false;
              c.tensor_model_parallel_size = t;
              c.sequence_parallel = t > 1;
              c.moe.num_experts = 6;
              c.moe.router.topk = 2;
              c.moe.ffn_hidden_size = 20;
              c.moe.layer_freq = "[1,0]";
              c.moe.expert_tensor_parallel_size = 1;
              c.moe.shared_expert_intermediate_size = shared;
              c.moe.load_balancing = balancing;
              c.moe.aux_loss_coeff = 1e-2;
              if (capacity > 0) c.moe.capacity.capacity_factor = 0.7;
              c.moe.capacity.pad_to_capacity = capacity == 2;
              if (recompute > 0) c.recompute_granularity = RecomputeGranularity::selective;
              c.recompute_mlp = c.recompute_shared_experts = recompute == 1;
              c.recompute_moe = recompute == 2;
              c.finalize();
              SCOPED_TRACE(c.summary() + " capacity " + std::to_string(capacity) + " tp " + std::to_string(t) +
                           " recompute " + std::to_string(recompute));
              const StageRange all{0, 2, true, true};
              expect_same_entries(measured(c, 3, {false, true}), layer_activation_formula(c, 3, all, 0));
              expect_same_entries(measured(c, 3), layer_activation_formula(c, 3, all, 1));
              ++cases;
            }
  EXPECT_EQ(cases, 2 * 2 * 3 * 3 * 2 * 2 * 3);
}

// Full recomputation keeps a layer's input alone (the paper's 2·s·b·h with 16-bit activations):
// here the output of the layer that ends a recompute group, which is the next group's input.
TEST(ActivationMemory, FullRecomputationKeepsOnlyTheGroupsOutput) {
  ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 64;
  c.num_attention_heads = 8;
  c.seq_length = 32;
  c.vocab_size = 128;
  c.params_dtype = DType::bf16;
  c.recompute_granularity = RecomputeGranularity::full;
  c.recompute_num_layers = 2;
  for (const bool sp : {false, true}) {
    c.tensor_model_parallel_size = sp ? 4 : 1;
    c.sequence_parallel = sp;
    c.finalize();
    const int64_t input = 2 * 32 * 2 * 64 / (sp ? 4 : 1);
    for (int64_t layer = 0; layer < 4; ++layer)
      EXPECT_EQ(ledger_bytes(layer_activation_formula(c, 2, {0, 4, true, true}, layer)), layer % 2 ? input : 0);
  }
}

// A 4-layer bf16 model recomputed in groups of `group` (block: the first `group` layers).
ModelConfig four_layers(RecomputeGranularity granularity, RecomputeMethod method, int64_t group,
                        Normalization norm = Normalization::layernorm) {
  ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 16;
  c.vocab_size = 64;
  c.params_dtype = DType::bf16;
  c.normalization = norm;
  c.recompute_granularity = granularity;
  c.recompute_method = method;
  c.recompute_num_layers = group;
  c.finalize();
  return c;
}

// A stage's own ledger (what --log-memory prints) is the formula's, for every layer, with and
// without recomputation.
TEST(ActivationMemory, AStagesLedgerIsTheFormulas) {
  for (const RecomputeGranularity granularity :
       {RecomputeGranularity::none, RecomputeGranularity::selective, RecomputeGranularity::full})
    for (const RecomputeMethod method : {RecomputeMethod::uniform, RecomputeMethod::block}) {
      const ModelConfig c = four_layers(granularity, method, 2);
      MemoryTracker memory;
      StageOptions options;
      options.slots = 2;
      const StageRange range{0, 4, true, true};
      Stage stage(c, range, 2, cpu_backend(), &memory, options);
      for (int64_t i = 0; i < 4; ++i) {
        SCOPED_TRACE("layer " + std::to_string(i));
        expect_same_entries(stage.layer_ledger(i), layer_activation_formula(c, 2, range, i));
      }
    }
}

// A stage's whole activation arena is the formula's: first, middle and last stages, a stage
// holding all, recomputation of each kind, sequence parallelism, several slots.
TEST(ActivationMemory, AStagesActivationBytesAreTheFormulas) {
  int cases = 0;
  for (const bool moe : {false, true})
  for (const StageRange range : {StageRange{0, 4, true, true}, StageRange{0, 2, true, false}, StageRange{1, 3, false, false},
                                 StageRange{2, 4, false, true}, StageRange{0, 0, true, false}})
    for (const RecomputeGranularity granularity :
         {RecomputeGranularity::none, RecomputeGranularity::selective, RecomputeGranularity::full})
      for (const int64_t group : {1, 2})
        for (const int slots : {1, 3}) {
          ModelConfig c = four_layers(granularity, group == 1 ? RecomputeMethod::block : RecomputeMethod::uniform,
                                      group, group == 1 ? Normalization::layernorm : Normalization::rmsnorm);
          if (moe) {  // MoE and dense layers mixed, so pool entries serve both kinds; and QK norms
            c.add_bias_linear = false;
            c.qk_layernorm = true;
            c.moe.num_experts = 4;
            c.moe.layer_freq = "[1,1,0,1]";
            c.moe.aux_loss_coeff = 1e-2;
            c.moe.capacity.capacity_factor = 1.5;
            c.finalize();
          }
          MemoryTracker memory;
          StageOptions options;
          options.slots = slots;
          Stage stage(c, range, 2, cpu_backend(), &memory, options);
          SCOPED_TRACE("layers " + std::to_string(range.first_layer) + ".." + std::to_string(range.last_layer) +
                       " recompute " + std::to_string(static_cast<int>(granularity)) + " group " +
                       std::to_string(group) + " slots " + std::to_string(slots));
          EXPECT_EQ(static_cast<int64_t>(stage.activation_bytes()), stage_activation_formula(c, 2, range, slots));
          ++cases;
        }
  EXPECT_EQ(cases, 2 * 5 * 3 * 2 * 2);
}

// Weights, gradients and optimizer state as a stage and AdamW allocate them: the DDP buffer's
// padding (--use-distributed-optimizer aligns every parameter), 16-bit weights with f32 main
// parameters, tied and untied heads, pipeline stages.
TEST(ModelStateMemory, WeightsGradsAndOptimizerAreTheFormulas) {
  int cases = 0;
  for (const StageRange range : {StageRange{0, 3, true, true}, StageRange{0, 1, true, false}, StageRange{1, 3, false, true}})
    for (const DType dtype : {DType::f32, DType::bf16})
      for (const bool untied : {false, true})
        for (const bool distributed : {false, true})
          for (const bool muon : {false, true}) {
          ModelConfig c;
          c.num_layers = 3;
          c.hidden_size = 40;
          c.num_attention_heads = 4;
          c.seq_length = 8;
          c.vocab_size = 70;
          c.params_dtype = dtype;
          c.untie_embeddings_and_output_weights = untied;
          c.finalize();
          MemoryTracker memory;
          StageOptions options;
          options.slots = 1;
          options.ddp.use_distributed_optimizer = distributed;
          Stage stage(c, range, 1, cpu_backend(), &memory, options);
          // Muon: one state for its matrices, Adam's two for the rest, and the step's scratch.
          const MuonSetup setup{MuonConfig{}, nullptr, nullptr, muon_qkv_rows(c)};
          const MuonGeometry geometry = setup.geometry();
          Optimizer optimizer(stage.params().params(), cpu_backend(), &memory, nullptr, {}, muon ? &setup : nullptr);
          const ModelStateBytes expected = model_state_bytes(c, range, options.ddp, muon ? &geometry : nullptr);
          SCOPED_TRACE(std::to_string(cases));
          EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::weights)), expected.weights);
          EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::grads)), expected.grads);
          EXPECT_EQ(static_cast<int64_t>(memory.peak(MemCategory::optimizer)),
                    expected.optimizer + (muon ? muon_scratch_bytes({expected}) : 0));
          ++cases;
        }
  EXPECT_EQ(cases, 3 * 2 * 2 * 2 * 2);
}

}  // namespace
}  // namespace mt
