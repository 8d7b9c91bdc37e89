// Counts the collectives each transformer layer issues under tensor parallelism and checks them
// against Megatron's figures (Korthikanti et al., table 1): per layer and direction, 2
// all-reduces of the [s, b, h] activations without sequence parallelism; with it, 2 all-gathers
// and 2 reduce-scatters of the same volume in the forward, and in the backward also the 2
// all-gathers that rebuild the inputs of the column-parallel weight gradients (as Megatron's
// backward does). A layer's share is the difference between a 2-layer and a 1-layer model, so
// the embedding and the output layer cancel out.
#include <map>

#include "comm/counting_communicator.h"
#include "model/gpt.h"
#include "parallel_testing.h"

namespace mt::test {
namespace {

constexpr int64_t kSeq = 64, kBatch = 2, kHidden = 128;

using Counts = std::map<std::string, std::pair<int, size_t>>;  // kind -> (calls, bytes)

Counts tally(const std::vector<CollectiveRecord>& records) {
  Counts c;
  for (const CollectiveRecord& r : records) {
    c[r.kind].first += 1;
    c[r.kind].second += r.bytes;
  }
  return c;
}

Counts minus(Counts a, const Counts& b) {
  for (const auto& [kind, v] : b) {
    a[kind].first -= v.first;
    a[kind].second -= v.second;
  }
  for (auto it = a.begin(); it != a.end();) it = it->second.first == 0 && it->second.second == 0 ? a.erase(it) : ++it;
  return a;
}

// Collectives of one forward and of one backward of a model with `layers` layers.
std::pair<Counts, Counts> count(int64_t layers, bool sp) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = kHidden;
  c.num_attention_heads = 8;
  c.seq_length = kSeq;
  c.vocab_size = 512;
  c.tensor_model_parallel_size = world().size();
  c.sequence_parallel = sp;
  c.finalize();
  CountingCommunicator counting(world());
  GptModelOptions options;
  options.tp_comm = &counting;
  GptModel model(c, kBatch, cpu_backend(), nullptr, options);
  model.params().init(1);
  HostTensor tokens = randint({kBatch, kSeq}, 512, 2), labels = randint({kBatch, kSeq}, 512, 3);
  ForwardOptions fo;
  fo.grad_scale = 1.0f;
  model.forward({tokens.view(), labels.view(), TensorView()}, fo);
  const Counts forward = tally(counting.records());
  counting.clear();
  model.backward();
  return {forward, tally(counting.records())};
}

TEST(TpCollectives, PerLayerMatchesMegatron) {
  const size_t sbh = kSeq * kBatch * kHidden * sizeof(float);
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "with sequence parallelism" : "without sequence parallelism");
    const auto [fwd2, bwd2] = count(2, sp);
    const auto [fwd1, bwd1] = count(1, sp);
    const Counts fwd = minus(fwd2, fwd1), bwd = minus(bwd2, bwd1);
    if (!sp) {
      EXPECT_EQ(fwd, (Counts{{"all_reduce", {2, 2 * sbh}}}));
      EXPECT_EQ(bwd, (Counts{{"all_reduce", {2, 2 * sbh}}}));
    } else {
      EXPECT_EQ(fwd, (Counts{{"all_gather", {2, 2 * sbh}}, {"reduce_scatter", {2, 2 * sbh}}}));
      EXPECT_EQ(bwd, (Counts{{"all_gather", {4, 4 * sbh}}, {"reduce_scatter", {2, 2 * sbh}}}));
    }
  }
}

}  // namespace
}  // namespace mt::test
