// Tests for ops/embedding.h: token (+ position) lookup into [s, b, h] with and without a position
// table and with explicit positions, backward accumulation of repeated ids (against an fp64
// reference and finite differences), determinism across thread counts, and id/shape errors.
#include "ops/embedding.h"

#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "testing.h"

namespace mt::test {
namespace {

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> s(a.size());
  for (size_t i = 0; i < a.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

// Thread-count control for the determinism checks (a no-op without OpenMP).
void set_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}
int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// out[i, j, :] = word[tokens[j, i]] + pos[positions[j, i] or i]  (pos optional).
std::vector<double> embedding_ref(HostTensor& tokens, HostTensor* positions, HostTensor& word, HostTensor* pos) {
  const int64_t b = tokens.shape[0], s = tokens.shape[1], h = word.shape[1];
  std::vector<double> out(static_cast<size_t>(s * b * h));
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < b; ++j) {
      const int64_t t = tokens.i32()[j * s + i], p = positions ? positions->i32()[j * s + i] : i;
      for (int64_t c = 0; c < h; ++c)
        out[(i * b + j) * h + c] = static_cast<double>(word.f32()[t * h + c]) + (pos ? pos->f32()[p * h + c] : 0.0);
    }
  return out;
}

// Lookups are exact copies or one f32 add: 1e-7 abs + 1e-6 rel only covers the add's rounding.
void check_forward(bool with_pos, bool explicit_positions) {
  const int64_t b = 3, s = 5, v = 11, p = 8, h = 37;
  HostTensor tokens = randint({b, s}, static_cast<int32_t>(v), 101), positions = randint({b, s}, p, 102);
  HostTensor word = randn({v, h}, 103), pos = randn({p, h}, 104), out = zeros({s, b, h});
  embedding_fwd(out.view(), tokens.view(), explicit_positions ? positions.view() : TensorView(), word.view(),
                with_pos ? pos.view() : TensorView());
  expect_close(out.f32(),
               embedding_ref(tokens, explicit_positions ? &positions : nullptr, word, with_pos ? &pos : nullptr),
               1e-7, 1e-6, "embedding out");
}

TEST(Embedding, ForwardWithPositionTableMatchesReference) { check_forward(true, false); }
TEST(Embedding, ForwardWithoutPositionTableMatchesReference) { check_forward(false, false); }
TEST(Embedding, ForwardWithExplicitPositionsMatchesReference) { check_forward(true, true); }

// Backward with few distinct ids, so many tokens hit the same row; onto random start gradients.
void check_backward(bool with_pos, bool explicit_positions) {
  const int64_t b = 3, s = 5, v = 4, p = 6, h = 37;
  HostTensor tokens = randint({b, s}, static_cast<int32_t>(v), 111), positions = randint({b, s}, p, 112);
  tokens.i32()[0] = tokens.i32()[1] = tokens.i32()[7] = 2;  // guaranteed repeats
  HostTensor word = randn({v, h}, 113), pos = randn({p, h}, 114), w = randn({s, b, h}, 115);
  HostTensor dword = randn({v, h}, 116), dpos = randn({p, h}, 117);
  const std::vector<double> dword0 = to_double(dword), dpos0 = to_double(dpos);
  const TensorView pos_ids = explicit_positions ? positions.view() : TensorView();
  embedding_bwd(dword.view(), with_pos ? dpos.view() : TensorView(), w.view(), tokens.view(), pos_ids);

  std::vector<double> ref_dword(dword0), ref_dpos(dpos0);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < b; ++j) {
      const int64_t t = tokens.i32()[j * s + i], q = explicit_positions ? positions.i32()[j * s + i] : i;
      for (int64_t c = 0; c < h; ++c) {
        ref_dword[t * h + c] += w.f32()[(i * b + j) * h + c];
        if (with_pos) ref_dpos[q * h + c] += w.f32()[(i * b + j) * h + c];
      }
    }
  // At most b·s = 15 f32 additions onto an O(1) start: 1e-5 abs.
  expect_close(dword.f32(), ref_dword, 1e-5, 1e-6, "dword");
  expect_close(dpos.f32(), ref_dpos, 1e-5, 1e-6, "dpos_table");

  // Finite differences of Σ out·w: the loss is linear in the tables, so only f32 rounding of one
  // output row (~1e-7/(2h) with h = 1e-2) remains; 1e-4 abs is far below a dropped or sign-flipped
  // contribution (O(1)).
  HostTensor out = zeros({s, b, h});
  auto loss = [&] {
    embedding_fwd(out.view(), tokens.view(), pos_ids, word.view(), with_pos ? pos.view() : TensorView());
    return weighted_sum(out.f32(), w.f32(), out.numel());
  };
  expect_close(dword.f32(), plus(dword0, finite_difference(word, loss)), 1e-4, 1e-4, "dword vs finite differences");
  if (with_pos)
    expect_close(dpos.f32(), plus(dpos0, finite_difference(pos, loss)), 1e-4, 1e-4, "dpos vs finite differences");
}

TEST(Embedding, BackwardAccumulatesRepeatedTokens) { check_backward(false, false); }
TEST(Embedding, BackwardWithPositionTableMatchesReference) { check_backward(true, false); }
TEST(Embedding, BackwardWithExplicitPositionsMatchesReference) { check_backward(true, true); }

// Moderately large: b = 4, s = 512, h = 768 with a small vocabulary (heavy repetition); forward
// and backward against the reference, and the backward bitwise identical for 1, 2 and 3 threads.
TEST(Embedding, LargeMatchesReferenceAndIsDeterministic) {
  const int64_t b = 4, s = 512, v = 300, p = 512, h = 768;
  HostTensor tokens = randint({b, s}, static_cast<int32_t>(v), 121);
  HostTensor word = randn({v, h}, 122), pos = randn({p, h}, 123), w = randn({s, b, h}, 124), out = zeros({s, b, h});
  embedding_fwd(out.view(), tokens.view(), TensorView(), word.view(), pos.view());
  expect_close(out.f32(), embedding_ref(tokens, nullptr, word, &pos), 1e-7, 1e-6, "embedding out");

  std::vector<double> ref_dword(static_cast<size_t>(v * h), 0.0);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t c = 0; c < h; ++c) ref_dword[tokens.i32()[j * s + i] * h + c] += w.f32()[(i * b + j) * h + c];

  std::vector<std::vector<uint8_t>> results;
  const int saved = max_threads();
  for (int threads : {1, 2, 3}) {
    set_threads(threads);
    HostTensor dword = zeros({v, h}), dpos = zeros({p, h});
    embedding_bwd(dword.view(), dpos.view(), w.view(), tokens.view(), TensorView());
    // ~b·s/V ≈ 7 (up to ~20) f32 additions of N(0, 1) values per element.
    expect_close(dword.f32(), ref_dword, 1e-5, 1e-5, "dword");
    results.push_back(dword.bytes);
  }
  set_threads(saved);
  for (size_t k = 1; k < results.size(); ++k) EXPECT_EQ(results[k], results[0]) << "thread count #" << k;
}

TEST(Embedding, OutOfRangeIdsThrowNamingThem) {
  const int64_t b = 2, s = 3, v = 5, p = 4, h = 8;
  HostTensor tokens = randint({b, s}, static_cast<int32_t>(v), 131), positions = randint({b, s}, p, 132);
  HostTensor word = randn({v, h}, 133), pos = randn({p, h}, 134), out = zeros({s, b, h});
  HostTensor dword = zeros({v, h}), dpos = zeros({p, h});
  tokens.i32()[1 * s + 2] = 5;  // tokens[1, 2] = V
  expect_error_mentioning([&] { embedding_fwd(out.view(), tokens.view(), TensorView(), word.view(), pos.view()); },
                          "tokens[1, 2] = 5");
  expect_error_mentioning([&] { embedding_bwd(dword.view(), dpos.view(), out.view(), tokens.view(), TensorView()); },
                          "tokens[1, 2] = 5");
  tokens.i32()[1 * s + 2] = -1;
  expect_error_mentioning([&] { embedding_fwd(out.view(), tokens.view(), TensorView(), word.view(), pos.view()); },
                          "tokens[1, 2] = -1");
  tokens.i32()[1 * s + 2] = 0;
  positions.i32()[0 * s + 1] = 4;  // positions[0, 1] = P
  expect_error_mentioning(
      [&] { embedding_fwd(out.view(), tokens.view(), positions.view(), word.view(), pos.view()); },
      "positions[0, 1] = 4");
  expect_error_mentioning(
      [&] { embedding_bwd(dword.view(), dpos.view(), out.view(), tokens.view(), positions.view()); },
      "positions[0, 1] = 4");
  // Implicit positions 0..s−1 need s <= P.
  HostTensor small_pos = randn({2, h}, 135);
  expect_error_mentioning(
      [&] { embedding_fwd(out.view(), tokens.view(), TensorView(), word.view(), small_pos.view()); },
      "sequence length 3");
}

TEST(Embedding, BadShapesThrow) {
  const int64_t b = 2, s = 3, v = 5, h = 8;
  HostTensor tokens = randint({b, s}, static_cast<int32_t>(v), 141), word = randn({v, h}, 142);
  HostTensor out = zeros({s, b, h}), wrong_layout = zeros({b, s, h}), bad_pos = randn({4, h + 1}, 143);
  HostTensor f32_tokens = randn({b, s}, 144), bad_positions = randint({s, b}, 3, 145);
  EXPECT_THROW(embedding_fwd(wrong_layout.view(), tokens.view(), TensorView(), word.view(), TensorView()), Error);
  EXPECT_THROW(embedding_fwd(out.view(), f32_tokens.view(), TensorView(), word.view(), TensorView()), Error);
  EXPECT_THROW(embedding_fwd(out.view(), tokens.view(), TensorView(), word.view(), bad_pos.view()), Error);
  HostTensor pos = randn({4, h}, 146);
  EXPECT_THROW(embedding_fwd(out.view(), tokens.view(), bad_positions.view(), word.view(), pos.view()), Error);
  HostTensor dword = zeros({v, h});
  EXPECT_THROW(embedding_bwd(dword.view(), TensorView(), wrong_layout.view(), tokens.view(), TensorView()), Error);
}

}  // namespace
}  // namespace mt::test
