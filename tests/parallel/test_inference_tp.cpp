// The inference engine under tensor parallelism (tp = 2, one group per pair of ranks): every
// step's logits, prefill and cached decode of sequences sharing steps, equal the single-rank
// engine's within 1e-5 on every rank (vocabulary-parallel logits gathered), and greedy decoding
// picks the same tokens; also for a mixture-of-experts model whose router carries expert biases
// (no --sequence-parallel needed: every rank has each step's rows), its experts whole on each rank,
// split over the pair (etp 2, Megatron's default), or spread over it (ep 2), by either dispatcher.
#include <algorithm>
#include <cmath>

#include "infer/engine.h"
#include "infer/generate.h"
#include "parallel/process_groups.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

ModelConfig llama_style(int tp) {
  ModelConfig m;
  m.num_layers = 2;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.num_query_groups = 2;
  m.seq_length = 32;
  m.vocab_size = 300;  // padded to 384 at tp 1 and 512 at tp 2: the padding rows differ
  m.normalization = Normalization::rmsnorm;
  m.position_embedding_type = PositionEmbedding::rope;
  m.activation = Activation::swiglu;
  m.add_bias_linear = false;
  m.tensor_model_parallel_size = tp;
  m.finalize();
  return m;
}

ModelConfig gpt2_style(int tp) {
  ModelConfig m = llama_style(1);
  m.num_query_groups = 4;
  m.normalization = Normalization::layernorm;
  m.position_embedding_type = PositionEmbedding::learned_absolute;
  m.activation = Activation::gelu_tanh;
  m.add_bias_linear = true;
  m.tensor_model_parallel_size = tp;
  m.finalize();
  return m;
}

// Sigmoid routing over 4 experts (top 2) steered by expert biases, and a shared expert; the
// experts over ep x etp ranks (etp 0: tp).
ModelConfig moe_style(int tp, int ep = 1, int etp = 0, MoeDispatcher dispatcher = MoeDispatcher::allgather) {
  ModelConfig m = llama_style(1);
  m.moe.num_experts = 4;
  m.moe.router.topk = 2;
  m.moe.ffn_hidden_size = 48;
  m.moe.shared_expert_intermediate_size = 32;
  m.moe.router.score_function = MoeScoreFunction::sigmoid;
  m.moe.expert_bias = true;
  m.moe.expert_model_parallel_size = ep;
  m.moe.expert_tensor_parallel_size = etp;
  m.moe.dispatcher = dispatcher;
  m.tensor_model_parallel_size = tp;
  m.finalize();
  return m;
}

std::unique_ptr<InferenceEngine> engine(const ModelConfig& c, Communicator* tp, const ExpertParallel& experts = {}) {
  EngineOptions o;
  o.slots = 2;
  o.max_step_tokens = 16;
  o.tp_comm = tp;
  o.experts = experts;
  auto e = std::make_unique<InferenceEngine>(c, cpu_backend(), nullptr, o);
  e->params().init(5);
  for (const auto& [name, bias] : e->expert_biases())  // nonzero: they change the experts chosen
    for (int64_t i = 0; i < bias.numel(); ++i) bias.f32()[i] = 0.4f * static_cast<float>(i % 3) - 0.3f;
  return e;
}

// `sharded`: the model on a tp group of 2 (with its expert groups inside it), `single` on one rank.
void check_tp_matches_single(const ModelConfig& sharded_config, const ModelConfig& single_config) {
  std::unique_ptr<Communicator> tp = world().split(world().rank() / 2, world().rank());
  const MoeConfig& m = sharded_config.moe;
  const ProcessGroups groups = make_process_groups(
      *tp, {.tp = 2, .ep = static_cast<int>(m.expert_model_parallel_size),
            .etp = m.enabled() ? static_cast<int>(m.expert_tensor_parallel_size) : 2});
  auto sharded = engine(sharded_config, tp.get(), {groups.ep.get(), groups.etp.get(), groups.etp_ep.get()});
  auto single = engine(single_config, nullptr);
  const int64_t vocab = 300;
  std::vector<int32_t> a = {5, 17, 250, 3, 99, 42, 7}, b = {11, 12, 13};
  double worst = 0.0;
  const auto compare = [&](const std::vector<SequenceChunk>& step) {
    const TensorView x = sharded->step(step), y = single->step(step);
    EXPECT_EQ(x.dim(0), y.dim(0));
    for (int64_t r = 0; r < x.dim(0); ++r)
      for (int64_t v = 0; v < vocab; ++v)
        worst = std::max(worst, static_cast<double>(std::fabs(x.f32()[r * x.dim(1) + v] - y.f32()[r * y.dim(1) + v])));
    // Greedy: the same next token from both.
    const auto best = [&](const TensorView& t) { return std::max_element(t.f32(), t.f32() + vocab) - t.f32(); };
    EXPECT_EQ(best(x), best(y));
  };
  compare({{1, 0, a.data(), 4, true}, {0, 0, b.data(), 3, false}});
  for (int64_t p = 4; p < 7; ++p) compare({{1, p, a.data() + p, 1, false}});
  EXPECT_LE(worst, 1e-5) << "tp 2 against one rank";
}

TEST(InferenceTp, LlamaStyleMatchesOneRank) { check_tp_matches_single(llama_style(2), llama_style(1)); }

// Sampled generation (temperature, nucleus, a seed) picks the same tokens on every tp rank as on
// one rank: the logits agree to rounding and the draws are keyed by (seed, request, step).
TEST(InferenceTp, SampledGenerationMatchesOneRank) {
  std::unique_ptr<Communicator> tp = world().split(world().rank() / 2, world().rank());
  auto sharded = engine(llama_style(2), tp.get());
  auto single = engine(llama_style(1), nullptr);
  std::vector<GenerationRequest> requests(2);
  requests[0].prompt = {5, 17, 250, 3};
  requests[1].prompt = {11, 12};
  for (GenerationRequest& r : requests) {
    r.tokens_to_generate = 10;
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 123;
  }
  const std::vector<GenerationResult> a = Generator(*sharded, -1).run(requests), b = Generator(*single, -1).run(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].tokens.size(), 10u);
  }
  // Every rank of the group drew the same tokens.
  std::vector<int32_t> mine = a[0].tokens, rank0 = a[0].tokens;
  tp->broadcast(TensorView(rank0.data(), DType::i32, {static_cast<int64_t>(rank0.size())}), 0);
  EXPECT_EQ(mine, rank0);
}
TEST(InferenceTp, Gpt2StyleMatchesOneRank) { check_tp_matches_single(gpt2_style(2), gpt2_style(1)); }
TEST(InferenceTp, MixtureOfExpertsWithExpertBiasMatchesOneRank) {
  ASSERT_FALSE(engine(moe_style(1), nullptr)->expert_biases().empty());
  for (const MoeDispatcher dispatcher : {MoeDispatcher::allgather, MoeDispatcher::alltoall})
    for (const auto& [ep, etp] : {std::pair{1, 1}, {1, 2}, {2, 1}}) {
      SCOPED_TRACE("ep " + std::to_string(ep) + " x etp " + std::to_string(etp) +
                   (dispatcher == MoeDispatcher::alltoall ? ", alltoall" : ", allgather"));
      check_tp_matches_single(moe_style(2, ep, etp, dispatcher), moe_style(1));
    }
}

// Each rank holds only its experts' shares: ep 2 halves the expert weights a rank keeps.
TEST(InferenceTp, ExpertParallelHoldsAShareOfTheExperts) {
  std::unique_ptr<Communicator> tp = world().split(world().rank() / 2, world().rank());
  const ProcessGroups groups = make_process_groups(*tp, {.tp = 2, .ep = 2, .etp = 1});
  const auto whole = engine(moe_style(2, 1, 1), tp.get());
  const auto shared = engine(moe_style(2, 2, 1), tp.get(), {groups.ep.get(), groups.etp.get(), groups.etp_ep.get()});
  const auto expert_elements = [](InferenceEngine& e) {
    int64_t n = 0;
    for (const Param& p : e.params().params()) n += p.expert ? p.value.numel() : 0;
    return n;
  };
  EXPECT_EQ(2 * expert_elements(*shared), expert_elements(*whole));
}

}  // namespace
}  // namespace mt::test
