// Tests for ops/cross_entropy.h: losses and lse against a log-softmax computed in double, extreme
// logits, the backward against the fp64 analytic gradient and finite differences, in place (dlogits
// aliasing logits) equal to out of place, a GPT-2-sized vocabulary, and label/shape errors.
#include "ops/cross_entropy.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "testing.h"

namespace mt::test {
namespace {

struct CeRef {
  std::vector<double> losses, lse;
};

CeRef ce_ref(HostTensor& logits, HostTensor& labels) {
  const int64_t n = logits.shape[0], v = logits.shape[1];
  CeRef ref{std::vector<double>(n), std::vector<double>(n)};
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logits.f32() + r * v;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t c = 0; c < v; ++c) mx = std::max(mx, static_cast<double>(x[c]));
    for (int64_t c = 0; c < v; ++c) sum += std::exp(x[c] - mx);
    ref.lse[r] = mx + std::log(sum);
    ref.losses[r] = ref.lse[r] - x[labels.i32()[r]];
  }
  return ref;
}

// dlogits[r, c] = dloss[r]·(softmax[r, c] − [c == label[r]]) in double.
std::vector<double> ce_grad_ref(HostTensor& logits, HostTensor& labels, HostTensor& dlosses) {
  const int64_t n = logits.shape[0], v = logits.shape[1];
  const CeRef ref = ce_ref(logits, labels);
  std::vector<double> g(static_cast<size_t>(n * v));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < v; ++c)
      g[r * v + c] = dlosses.f32()[r] * (std::exp(logits.f32()[r * v + c] - ref.lse[r]) -
                                         (c == labels.i32()[r] ? 1.0 : 0.0));
  return g;
}

// Losses are O(1)–O(10): lse carries the f32 rounding of its max + log(Σ) (~1e-6 relative), so
// 2e-5 abs + 2e-6 rel; a wrong max shift, a missing log or the wrong label term is off by O(1).
void check_forward(int64_t n, int64_t v, float scale) {
  HostTensor logits = randn({n, v}, 221, scale), labels = randint({n}, static_cast<int32_t>(v), 222);
  HostTensor losses = zeros({n}), lse = zeros({n});
  cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
  const CeRef ref = ce_ref(logits, labels);
  expect_close(losses.f32(), ref.losses, 2e-5, 2e-6, "losses");
  expect_close(lse.f32(), ref.lse, 2e-5, 2e-6, "lse");
}

TEST(CrossEntropy, ForwardMatchesLogSoftmaxInDouble) { check_forward(7, 37, 3.0f); }
TEST(CrossEntropy, ForwardWideRowsMatchLogSoftmaxInDouble) { check_forward(5, 5003, 2.0f); }

// Rows with huge, tiny and equal logits stay finite and exact: no overflow in exp, no log(0).
TEST(CrossEntropy, ForwardExtremeLogitsAreStable) {
  const int64_t n = 4, v = 37;
  HostTensor logits = zeros({n, v}), labels(DType::i32, {n}), losses = zeros({n}), lse = zeros({n});
  for (int64_t c = 0; c < v; ++c) {
    logits.f32()[0 * v + c] = c == 5 ? 1000.0f : 0.0f;   // one dominant logit
    logits.f32()[1 * v + c] = -1000.0f + static_cast<float>(c);  // all very negative
    logits.f32()[2 * v + c] = 80.0f;                   // all equal and large: lse = 80 + log V
    logits.f32()[3 * v + c] = c % 2 ? 88.0f : -88.0f;  // exp would overflow without the max shift
  }
  const int32_t lab[] = {5, 0, 3, 2};
  std::memcpy(labels.i32(), lab, sizeof(lab));
  cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
  const CeRef ref = ce_ref(logits, labels);
  for (int64_t r = 0; r < n; ++r) ASSERT_TRUE(std::isfinite(losses.f32()[r])) << "row " << r;
  // lse up to 1000 in magnitude: f32 rounding there is 3e-5, hence 1e-4 abs + 1e-6 rel.
  expect_close(losses.f32(), ref.losses, 1e-4, 1e-6, "losses");
  expect_close(lse.f32(), ref.lse, 1e-4, 1e-6, "lse");
}

// Backward against the analytic gradient and central differences of Σ losses·dlosses.
void check_backward(int64_t n, int64_t v, bool finite_diff) {
  HostTensor logits = randn({n, v}, 231, 3.0f), labels = randint({n}, static_cast<int32_t>(v), 232);
  HostTensor dlosses = randn({n}, 233), losses = zeros({n}), lse = zeros({n});
  dlosses.f32()[n / 2] = 0.0f;  // a masked token: its gradient row must be exactly zero
  cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
  HostTensor dlogits = randn({n, v}, 234);  // garbage: the op overwrites, it does not accumulate
  cross_entropy_bwd(dlogits.view(), dlosses.view(), logits.view(), lse.view(), labels.view());
  const std::vector<double> ref = ce_grad_ref(logits, labels, dlosses);
  // Gradients are dloss·(p − onehot) with p ≤ 1: exp(x − lse) in f32 is ~2e-7 relative plus the
  // f32 lse's own rounding (~5e-7·|lse|); 1e-6 abs + 1e-5 rel.
  expect_close(dlogits.f32(), ref, 1e-6, 1e-5, "dlogits");
  for (int64_t c = 0; c < v; ++c) ASSERT_EQ(dlogits.f32()[(n / 2) * v + c], 0.0f) << "masked row, column " << c;
  if (!finite_diff) return;
  // h = 1e-2: truncation h²/6·|∂³ loss| ≤ 2e-5·0.1·|dloss|, f32 noise of one loss (~5e-7 at
  // |loss| ≈ 5) over 2h ≈ 3e-5; 2e-4 abs + 1e-3 rel.  A flipped or missing one-hot term is off by
  // |dloss| = O(1) in the label column; a flipped softmax term by 2p·|dloss|, where the largest p
  // per row (logits of scale 3 over 37 classes) is O(0.1–1).
  auto loss = [&] {
    cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
    return weighted_sum(losses.f32(), dlosses.f32(), n);
  };
  expect_close(dlogits.f32(), finite_difference(logits, loss), 2e-4, 1e-3, "dlogits vs finite differences");
}

TEST(CrossEntropy, BackwardMatchesReferenceAndFiniteDifferences) { check_backward(7, 37, true); }

// In place (dlogits = logits) gives bit-identical gradients to a separate buffer.
TEST(CrossEntropy, BackwardInPlaceEqualsOutOfPlace) {
  const int64_t n = 9, v = 1001;
  HostTensor logits = randn({n, v}, 241, 2.0f), labels = randint({n}, static_cast<int32_t>(v), 242);
  HostTensor dlosses = randn({n}, 243), losses = zeros({n}), lse = zeros({n}), dlogits = zeros({n, v});
  cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
  cross_entropy_bwd(dlogits.view(), dlosses.view(), logits.view(), lse.view(), labels.view());
  cross_entropy_bwd(logits.view(), dlosses.view(), logits.view(), lse.view(), labels.view());
  EXPECT_EQ(0, std::memcmp(logits.f32(), dlogits.f32(), static_cast<size_t>(n * v) * 4));
}

// GPT-2-sized vocabulary (V = 50304) on 64 rows: forward and backward against double.
TEST(CrossEntropy, LargeVocabularyMatchesReference) {
  const int64_t n = 64, v = 50304;
  HostTensor logits = randn({n, v}, 251, 4.0f), labels = randint({n}, static_cast<int32_t>(v), 252);
  HostTensor dlosses = randn({n}, 253), losses = zeros({n}), lse = zeros({n});
  cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
  const CeRef ref = ce_ref(logits, labels);
  expect_close(losses.f32(), ref.losses, 2e-5, 2e-6, "losses");
  const std::vector<double> grad = ce_grad_ref(logits, labels, dlosses);
  cross_entropy_bwd(logits.view(), dlosses.view(), logits.view(), lse.view(), labels.view());  // in place
  // Same tolerance as above; probabilities here are mostly ~1e-6, so this is relative accuracy.
  expect_close(logits.f32(), grad, 1e-6, 1e-5, "dlogits");
}

TEST(CrossEntropy, OutOfRangeLabelThrowsNamingIt) {
  const int64_t n = 5, v = 37;
  HostTensor logits = randn({n, v}, 261), labels = randint({n}, static_cast<int32_t>(v), 262);
  HostTensor losses = zeros({n}), lse = zeros({n}), dlosses = randn({n}, 263), dlogits = zeros({n, v});
  for (int32_t bad : {37, -1}) {
    labels.i32()[3] = bad;
    const std::string needle = "labels[3] = " + std::to_string(bad);
    try {
      cross_entropy_fwd(losses.view(), lse.view(), logits.view(), labels.view());
      ADD_FAILURE() << "forward accepted label " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_THROW(cross_entropy_bwd(dlogits.view(), dlosses.view(), logits.view(), lse.view(), labels.view()), Error);
  }
}

TEST(CrossEntropy, BadShapesThrow) {
  const int64_t n = 5, v = 37;
  HostTensor logits = randn({n, v}, 271), labels = randint({n}, static_cast<int32_t>(v), 272);
  HostTensor losses = zeros({n}), lse = zeros({n}), bad = zeros({n + 1}), f32_labels = zeros({n});
  HostTensor dlosses = zeros({n}), bad_dlogits = zeros({n, v + 1});
  EXPECT_THROW(cross_entropy_fwd(bad.view(), lse.view(), logits.view(), labels.view()), Error);
  EXPECT_THROW(cross_entropy_fwd(losses.view(), bad.view(), logits.view(), labels.view()), Error);
  EXPECT_THROW(cross_entropy_fwd(losses.view(), lse.view(), logits.view(), f32_labels.view()), Error);
  EXPECT_THROW(cross_entropy_bwd(bad_dlogits.view(), dlosses.view(), logits.view(), lse.view(), labels.view()),
               Error);
  // A shifted overlap of dlogits and logits is refused (only exact aliasing is allowed).
  HostTensor big = randn({n + 1, v}, 273);
  const TensorView x = big.view().rows(0, n), g = big.view().rows(1, n);
  EXPECT_THROW(cross_entropy_bwd(g, dlosses.view(), x, lse.view(), labels.view()), Error);
}

}  // namespace
}  // namespace mt::test
