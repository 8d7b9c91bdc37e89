// Device cases of ops/cross_entropy.h against the CPU backend: the fused forward and backward
// (out of place and in place, masked rows), the vocabulary-parallel pieces composed over shards as
// the tensor-parallel loss composes them, and the out-of-range label error.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "device_testing.h"
#include "ops/cross_entropy.h"

namespace mt::test {
namespace {

// Σ exp in another order (double per-thread partials vs the CPU's f32 blocks): lse within ~1e-7
// relative, carried into the loss; gradients are d·exp(x − lse) of near-identical lse.
constexpr double kAtol = 1e-5, kRtol = 1e-5;

struct Dims {
  int64_t rows, vocab;
};
const Dims kDims[] = {{1, 1}, {1, 5}, {7, 37}, {3, 256}, {5, 1001}, {4, 5003}, {2, 50304}};

std::string name(const Dims& d) { return std::to_string(d.rows) + "x" + std::to_string(d.vocab); }

TEST(DeviceCrossEntropy, ForwardAndBackward) {
  for (const Dims& d : kDims) {
    SCOPED_TRACE(name(d));
    DeviceCase dev;
    HostTensor logits = randn({d.rows, d.vocab}, 1, 3.0f), labels = randint({d.rows}, int32_t(d.vocab), 2);
    logits.f32()[0] = 80.0f;  // an extreme logit: the max must be taken out before exp
    HostTensor losses = zeros({d.rows}), lse = zeros({d.rows}), dlosses = randn({d.rows}, 3);
    if (d.rows > 2) dlosses.f32()[1] = 0.0f;  // a masked token: its row is exactly 0
    HostTensor dlogits = zeros({d.rows, d.vocab});
    const TensorView logits_dev = dev.upload(logits), labels_dev = dev.upload(labels);
    const TensorView losses_dev = dev.poisoned(DType::f32, {d.rows}), lse_dev = dev.poisoned(DType::f32, {d.rows});
    cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
    cross_entropy_fwd(losses_dev, lse_dev, logits_dev, labels_dev);
    dev.expect_matches(lse_dev, lse, kAtol, kRtol, "cross_entropy_fwd lse");
    dev.expect_matches(losses_dev, losses, kAtol, kRtol, "cross_entropy_fwd losses");

    // The backward from the CPU's lse on both, so only the backward itself is compared.
    const TensorView dlosses_dev = dev.upload(dlosses), cpu_lse_dev = dev.upload(lse);
    const TensorView dlogits_dev = dev.poisoned(DType::f32, {d.rows, d.vocab});
    cross_entropy_bwd(dlogits.view(), dlosses.view(), logits.view(), lse.view(), labels.view());
    cross_entropy_bwd(dlogits_dev, dlosses_dev, logits_dev, cpu_lse_dev, labels_dev);
    dev.expect_matches(dlogits_dev, dlogits, 1e-6, kRtol, "cross_entropy_bwd");
    // In place: dlogits overwrites logits, with the same result.
    cross_entropy_bwd(logits_dev, dlosses_dev, logits_dev, cpu_lse_dev, labels_dev);
    dev.expect_matches(logits_dev, dlogits, 1e-6, kRtol, "cross_entropy_bwd in place");
  }
}

// The vocab-parallel pieces on shards of the vocabulary: max per shard, the max reduced (as the
// all-reduce would), sums and targets per shard, reduced, the loss, then the backward per shard.
TEST(DeviceCrossEntropy, VocabParallelShards) {
  for (const Dims& d : {Dims{7, 37}, Dims{5, 1001}, Dims{3, 5003}}) {
    SCOPED_TRACE(name(d));
    DeviceCase dev;
    HostTensor logits = randn({d.rows, d.vocab}, 11, 2.0f), labels = randint({d.rows}, int32_t(d.vocab), 12);
    HostTensor dlosses = randn({d.rows}, 13);
    const int64_t shards = 3, width = (d.vocab + shards - 1) / shards;
    HostTensor max_all = zeros({d.rows}), sum_all = zeros({d.rows}), tgt_all = zeros({d.rows});
    HostTensor max_dev_all = zeros({d.rows}), sum_dev_all = zeros({d.rows}), tgt_dev_all = zeros({d.rows});
    for (int64_t r = 0; r < d.rows; ++r) max_all.f32()[r] = max_dev_all.f32()[r] = -INFINITY;
    std::vector<HostTensor> pieces;
    for (int64_t k = 0; k < shards; ++k) {
      const int64_t start = k * width, v = std::min(width, d.vocab - start);
      HostTensor piece = zeros({d.rows, v});
      for (int64_t r = 0; r < d.rows; ++r)
        std::memcpy(piece.f32() + r * v, logits.f32() + r * d.vocab + start, static_cast<size_t>(v) * 4);
      pieces.push_back(piece);
    }
    std::vector<TensorView> pieces_dev;
    for (HostTensor& p : pieces) pieces_dev.push_back(dev.upload(p));
    // Max: per shard, compared, then reduced on the host (the all-reduce's job).
    for (int64_t k = 0; k < shards; ++k) {
      HostTensor mx = zeros({d.rows});
      const TensorView mx_dev = dev.poisoned(DType::f32, {d.rows});
      cross_entropy_shard_max(mx.view(), pieces[k].view());
      cross_entropy_shard_max(mx_dev, pieces_dev[k]);
      dev.expect_matches(mx_dev, mx, 0, 0, "cross_entropy_shard_max");  // a max is exact
      for (int64_t r = 0; r < d.rows; ++r) max_all.f32()[r] = std::max(max_all.f32()[r], mx.f32()[r]);
    }
    const TensorView max_dev = dev.upload(max_all), labels_dev = dev.upload(labels);
    for (int64_t k = 0; k < shards; ++k) {
      HostTensor sum = zeros({d.rows}), tgt = zeros({d.rows});
      const TensorView sum_dev = dev.poisoned(DType::f32, {d.rows}), tgt_dev = dev.poisoned(DType::f32, {d.rows});
      cross_entropy_shard_sums(sum.view(), tgt.view(), pieces[k].view(), labels.view(), max_all.view(), k * width);
      cross_entropy_shard_sums(sum_dev, tgt_dev, pieces_dev[k], labels_dev, max_dev, k * width);
      dev.expect_matches(sum_dev, sum, kAtol, kRtol, "cross_entropy_shard_sums sum_exp");
      dev.expect_matches(tgt_dev, tgt, 0, 0, "cross_entropy_shard_sums target");  // a copy is exact
      for (int64_t r = 0; r < d.rows; ++r) {
        sum_all.f32()[r] += sum.f32()[r];
        tgt_all.f32()[r] += tgt.f32()[r];
      }
    }
    HostTensor losses = zeros({d.rows}), lse = zeros({d.rows});
    const TensorView losses_dev = dev.poisoned(DType::f32, {d.rows}), lse_dev = dev.poisoned(DType::f32, {d.rows});
    cross_entropy_shard_loss(losses.view(), lse.view(), max_all.view(), sum_all.view(), tgt_all.view());
    cross_entropy_shard_loss(losses_dev, lse_dev, max_dev, dev.upload(sum_all), dev.upload(tgt_all));
    dev.expect_matches(lse_dev, lse, 1e-6, 1e-6, "cross_entropy_shard_loss lse");
    dev.expect_matches(losses_dev, losses, 1e-6, 1e-6, "cross_entropy_shard_loss losses");
    const TensorView dlosses_dev = dev.upload(dlosses), lse_in_dev = dev.upload(lse);
    for (int64_t k = 0; k < shards; ++k) {
      HostTensor g = zeros(pieces[k].shape);
      const TensorView g_dev = dev.poisoned(DType::f32, pieces[k].shape);
      cross_entropy_shard_bwd(g.view(), dlosses.view(), pieces[k].view(), lse.view(), labels.view(), k * width);
      cross_entropy_shard_bwd(g_dev, dlosses_dev, pieces_dev[k], lse_in_dev, labels_dev, k * width);
      dev.expect_matches(g_dev, g, 1e-6, kRtol, "cross_entropy_shard_bwd");
    }
  }
}

TEST(DeviceCrossEntropy, OutOfRangeLabelThrowsNamingIt) {
  const int64_t n = 5, v = 37;
  DeviceCase dev;
  HostTensor logits = randn({n, v}, 21), labels = randint({n}, int32_t(v), 22);
  const TensorView logits_dev = dev.upload(logits), dlosses_dev = dev.upload(randn({n}, 23).view());
  const TensorView losses_dev = dev.poisoned(DType::f32, {n}), lse_dev = dev.poisoned(DType::f32, {n});
  const TensorView dlogits_dev = dev.poisoned(DType::f32, {n, v});
  for (int32_t bad : {37, -1}) {
    labels.i32()[3] = bad;
    labels.i32()[4] = 1000;  // a later offender: the first one is named
    const TensorView labels_dev = dev.upload(labels);
    const std::string needle = "labels[3] = " + std::to_string(bad);
    expect_error_mentioning([&] { cross_entropy_fwd(losses_dev, lse_dev, logits_dev, labels_dev); }, needle);
    expect_error_mentioning(
        [&] { cross_entropy_bwd(dlogits_dev, dlosses_dev, logits_dev, lse_dev, labels_dev); }, needle);
  }
}

}  // namespace
}  // namespace mt::test
